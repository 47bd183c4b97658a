"""Dataset-condensation and DP-generator baselines of ATS's Table 5: the client trains on synthetic data
(``dc``, ``dsa``, ``dm``, ``dp-merf``, ``gs-wgan``). Importing registers them."""

from leakshield.defenses.condensation.defense import (
    GSWGAN,
    DatasetCondensation,
    DistributionMatching,
    DPMerf,
    SiameseAugmentedCondensation,
)

__all__ = ["GSWGAN", "DPMerf", "DatasetCondensation", "DistributionMatching", "SiameseAugmentedCondensation"]
