"""The federated classifier of Anti-GAN's experiments (Luo & Zhang, TKDD 2025, appendix Table 6)."""

from __future__ import annotations

import pydantic
from torch import nn

from leakshield.models.base import FeatureClassifier, flat_size
from leakshield.models.registry import MODELS
from leakshield.registry import Params


class SmallCNNParams(Params):
    """dropout: the rate of the dropout layer after the convolutions (Table 6: 0.5)."""

    dropout: float = pydantic.Field(default=0.5, ge=0, lt=1)


@MODELS.register(
    "antigan-cnn",
    summary="Anti-GAN's classifier: conv3×3(16)-ReLU-pool2, conv3×3(64)-ReLU-pool2, dropout 0.5, "
    "Linear(100)-ReLU, Linear",
    reference="Luo & Zhang, Exploiting Defenses against GAN-Based Feature Inference Attacks in FL, TKDD "
    "2025, Table 6",
    params=SmallCNNParams,
)
def antigan_cnn(params: SmallCNNParams, in_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """Convolutions padded to keep the side (the table gives kernels only); 32×32 → 4096 → 100."""
    convs = nn.Sequential(
        nn.Conv2d(in_shape[0], 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 64, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Dropout(params.dropout),
        nn.Flatten(),
    )
    features = nn.Sequential(*convs, nn.Linear(flat_size(convs, in_shape), 100), nn.ReLU())
    return FeatureClassifier(features, nn.Linear(100, num_classes))
