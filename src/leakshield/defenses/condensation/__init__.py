"""Dataset-condensation and DP-generator baselines of ATS's Table 5: the client trains on synthetic data
(``dc``, ``dsa``, ``dm``, ``dp-merf``). Importing registers them."""

from leakshield.defenses.condensation.defense import (
    DatasetCondensation,
    DistributionMatching,
    DPMerf,
    SiameseAugmentedCondensation,
)

__all__ = ["DPMerf", "DatasetCondensation", "DistributionMatching", "SiameseAugmentedCondensation"]
