"""Attacks (registry): each takes a ServerView and returns a Reconstruction.

Folders by who attacks and what it sees (:mod:`leakshield.threats`): :mod:`leakshield.attacks.passive`
(an honest-but-curious server inverting single updates: gradient inversion, analytic recovery, labels),
:mod:`leakshield.attacks.prior` (a server with a generative prior fitted on the public split),
:mod:`leakshield.attacks.adaptive` (a server that knows the defense's public configuration, one attack
per defense), :mod:`leakshield.attacks.active` (a server that tampers with the model it sends),
:mod:`leakshield.attacks.aggregate` (a server that sees only the secure aggregate) and
:mod:`leakshield.attacks.participant` (a malicious client)."""

from leakshield.attacks import (  # noqa: F401  (register attacks)
    active,
    adaptive,
    aggregate,
    learned,
    participant,
    passive,
    prior,
)
from leakshield.attacks.base import ATTACKS, Attack, Reconstruction, ServerKnowledge, create_attack
from leakshield.attacks.passive.labels import infer_labels, label_accuracy
from leakshield.old_import_paths import attacks_getattr as __getattr__  # noqa: F401  (0.2's submodules)

__all__ = [
    "ATTACKS",
    "Attack",
    "Reconstruction",
    "ServerKnowledge",
    "create_attack",
    "infer_labels",
    "label_accuracy",
]
