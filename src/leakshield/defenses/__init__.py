"""Defenses (registry) and the staged client pipeline they plug into."""

from leakshield.artifacts import FitData
from leakshield.defenses import (  # noqa: F401  (register defenses)
    antigan,
    ats,
    augmentation,
    clipping,
    condensation,
    dcs2,
    dominance_guard,
    dpsgd,
    drift_guard,
    dropout,
    loda,
    loss_guard,
    mixing,
    noise,
    none,
    precode,
    pruning,
    quantization,
    row_guard,
    soteria,
)
from leakshield.defenses.base import (
    ACCEPTED,
    DEFENSES,
    ClientContext,
    Defense,
    DefensePipeline,
    Verdict,
    create_defense,
)

__all__ = [
    "ACCEPTED",
    "DEFENSES",
    "ClientContext",
    "Defense",
    "DefensePipeline",
    "FitData",
    "Verdict",
    "create_defense",
]
