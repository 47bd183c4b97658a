"""Defenses (registry) and the staged client pipeline they plug into."""

from leakshield.artifacts import FitData
from leakshield.defenses import (  # noqa: F401  (register defenses)
    antigan,
    ats,
    augmentation,
    clipping,
    condensation,
    dcs2,
    dpsgd,
    dropout,
    loda,
    mixing,
    noise,
    none,
    precode,
    pruning,
    quantization,
    soteria,
)
from leakshield.defenses.base import (
    DEFENSES,
    ClientContext,
    Defense,
    DefensePipeline,
    create_defense,
)

__all__ = ["DEFENSES", "ClientContext", "Defense", "DefensePipeline", "FitData", "create_defense"]
