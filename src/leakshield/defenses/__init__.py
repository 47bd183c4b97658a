"""Defenses (registry) and the staged client pipeline they plug into."""

from leakshield.artifacts import FitData
from leakshield.defenses import (  # noqa: F401  (register defenses)
    antigan,
    ats,
    augmentation,
    censor,
    clipping,
    condensation,
    dcs2,
    dp_fedavg,
    dpsgd,
    dropout,
    guards,
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
    ACCEPTED,
    DEFENSES,
    ClientContext,
    Defense,
    DefensePipeline,
    Verdict,
    create_defense,
)
from leakshield.old_import_paths import defenses_getattr as __getattr__  # noqa: F401  (0.2's submodules)

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
