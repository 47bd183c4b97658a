"""Federated learning: participants (the honest client runs the defense stages around FedSGD or
FedAvg on its own copy of the model), the server (sampling, aggregation, round observers), and what
the server observes of a victim."""

from leakshield.fl.aggregation import AGGREGATORS, Aggregator, create_aggregator
from leakshield.fl.client import ClientTrace, HonestClient, compute_update, seeded_generator
from leakshield.fl.config import FLConfig, LocalTraining
from leakshield.fl.observation import Observation, observe_victim, server_view_of
from leakshield.fl.participants import Participant, RoundObserver
from leakshield.fl.simulation import FederatedSimulation
from leakshield.fl.steps import DefenseSteps
from leakshield.fl.types import (
    ClientUpdate,
    PreparedModel,
    ProtocolFacts,
    ServerKnowledge,
    ServerSecrets,
    ServerView,
    ThreatModel,
    build_server_view,
    strip_hooks,
)
from leakshield.gradients import plain_gradient
from leakshield.loss import cross_entropy, training_loss

__all__ = [
    "AGGREGATORS",
    "Aggregator",
    "ClientTrace",
    "ClientUpdate",
    "DefenseSteps",
    "FLConfig",
    "FederatedSimulation",
    "HonestClient",
    "LocalTraining",
    "Observation",
    "Participant",
    "PreparedModel",
    "ProtocolFacts",
    "RoundObserver",
    "ServerKnowledge",
    "ServerSecrets",
    "ServerView",
    "ThreatModel",
    "build_server_view",
    "compute_update",
    "create_aggregator",
    "cross_entropy",
    "observe_victim",
    "plain_gradient",
    "seeded_generator",
    "server_view_of",
    "strip_hooks",
    "training_loss",
]
