"""Attacks (registry): each takes a ServerView and returns a Reconstruction."""

from leakshield.attacks import (  # noqa: F401  (register attacks)
    adaptive,
    analytic,
    ats_adaptive,
    carlini,
    cocktail_party,
    dcs2_adaptive,
    feature_fishing,
    fishing,
    gan,
    ggl,
    guard_evasion,
    imprint,
    inversion,
    label_counts,
    loda_adaptive,
    loki,
    precode_analytic,
    seer,
    trap_weights,
)
from leakshield.attacks.base import ATTACKS, Attack, Reconstruction, ServerKnowledge, create_attack
from leakshield.attacks.labels import infer_labels, label_accuracy

__all__ = [
    "ATTACKS",
    "Attack",
    "Reconstruction",
    "ServerKnowledge",
    "create_attack",
    "infer_labels",
    "label_accuracy",
]
