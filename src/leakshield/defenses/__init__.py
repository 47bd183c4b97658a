"""Defenses (registry) and the staged client pipeline they plug into."""

from leakshield.defenses import none  # noqa: F401  (register defenses)
from leakshield.defenses.base import (
    DEFENSES,
    Defense,
    DefensePipeline,
    FitContext,
    create_defense,
)

__all__ = ["DEFENSES", "Defense", "DefensePipeline", "FitContext", "create_defense"]
