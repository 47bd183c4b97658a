"""LODA (Wan et al., Defense Against Gradient Leakage Attacks via Learning to Obscure Data): the public
feature extractor, the encoder of Eq. 4 and the defense."""

from leakshield.defenses.loda import defense  # noqa: F401  (registers the defense)
from leakshield.defenses.loda.encoder import obscure, obscure_one_by_one, stationarity_residual
from leakshield.defenses.loda.extractor import ExtractorParams, feature_map, fitted_extractor, train_extractor

__all__ = [
    "ExtractorParams",
    "feature_map",
    "fitted_extractor",
    "obscure",
    "obscure_one_by_one",
    "stationarity_residual",
    "train_extractor",
]
