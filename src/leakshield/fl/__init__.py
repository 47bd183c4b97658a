"""FL simulation: client updates through the defense stages, FedSGD/FedAvg servers, attacker views."""

from leakshield.fl.client import ClientTrace, compute_update, plain_gradient, server_view_of
from leakshield.fl.config import FLConfig, LocalTraining
from leakshield.fl.loss import cross_entropy, training_loss
from leakshield.fl.simulation import FederatedSimulation, seeded_generator
from leakshield.fl.types import (
    ClientUpdate,
    ProtocolFacts,
    ServerView,
    ThreatModel,
    build_server_view,
    strip_hooks,
)

__all__ = [
    "ClientTrace",
    "ClientUpdate",
    "FLConfig",
    "FederatedSimulation",
    "LocalTraining",
    "ProtocolFacts",
    "ServerView",
    "ThreatModel",
    "build_server_view",
    "compute_update",
    "cross_entropy",
    "plain_gradient",
    "seeded_generator",
    "server_view_of",
    "strip_hooks",
    "training_loss",
]
