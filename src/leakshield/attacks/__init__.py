"""Attacks (registry): each takes a ServerView and returns a Reconstruction."""

from leakshield.attacks import inversion  # noqa: F401  (register attacks)
from leakshield.attacks.base import ATTACKS, Attack, Reconstruction, create_attack
from leakshield.attacks.labels import infer_labels, label_accuracy

__all__ = ["ATTACKS", "Attack", "Reconstruction", "create_attack", "infer_labels", "label_accuracy"]
