"""Gradient inversion by gradient matching: engine, objectives, presets."""

from leakshield.attacks.passive.inversion import presets  # noqa: F401  (register presets)
from leakshield.attacks.passive.inversion.engine import GradientInversion, GradientInversionParams
from leakshield.attacks.passive.inversion.objectives import cosine_distance, l2_distance, total_variation
from leakshield.schedules import ig_milestones

__all__ = [
    "GradientInversion",
    "GradientInversionParams",
    "cosine_distance",
    "ig_milestones",
    "l2_distance",
    "total_variation",
]
