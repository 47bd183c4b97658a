"""Adaptive attacks: a server that knows the defense's public configuration (Kerckhoffs), one per
defense — noise, Soteria and dropout (:mod:`leakshield.attacks.adaptive.inversion`), ATS, DCS², LODA,
PRECODE, CENSOR, and Carlini et al.'s attack on instance encoding (MixUp, InstaHide)."""

from leakshield.attacks.adaptive import ats, carlini, censor, dcs2, inversion, loda, precode  # noqa: F401  (register)
from leakshield.attacks.adaptive.inversion import (
    ADAPTIVE_IG,
    AdaptiveInversion,
    DropoutMaskInference,
    NoiseAwareInversion,
    SoteriaBypass,
    find_defense,
    infer_dropout_masks,
    noise_adaptation,
    soteria_adaptation,
)

__all__ = [
    "ADAPTIVE_IG",
    "AdaptiveInversion",
    "DropoutMaskInference",
    "NoiseAwareInversion",
    "SoteriaBypass",
    "find_defense",
    "infer_dropout_masks",
    "noise_adaptation",
    "soteria_adaptation",
]
