"""Gradient inversion by gradient matching: engine, objectives, presets."""

from leakshield.attacks.inversion import presets  # noqa: F401  (register presets)
from leakshield.attacks.inversion.engine import GradientInversion, GradientInversionParams
from leakshield.attacks.inversion.objectives import cosine_distance, l2_distance, total_variation
from leakshield.schedules import ig_milestones

__all__ = [
    "GradientInversion",
    "GradientInversionParams",
    "cosine_distance",
    "ig_milestones",
    "l2_distance",
    "total_variation",
]
