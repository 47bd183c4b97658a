"""The sigmoid LeNets of DLG/iDLG (3 convolutions) and Soteria/CPL (4 convolutions)."""

from __future__ import annotations

from typing import Literal

import pydantic
from torch import nn

from leakshield.models.base import FeatureClassifier, flat_size
from leakshield.models.registry import MODELS
from leakshield.registry import Params


class LeNetParams(Params):
    """init_range: weights and biases ~ U[−r, r] (DLG's r = 0.5, essential for DLG); None keeps
    PyTorch's default init. activation: ``sigmoid`` (the papers'), ``tanh`` or ``relu`` (a variant
    that trains from PyTorch's default init, where the sigmoid net stalls)."""

    init_range: float | None = pydantic.Field(default=0.5, gt=0)
    activation: Literal["sigmoid", "tanh", "relu"] = "sigmoid"


ACTIVATIONS = {"sigmoid": nn.Sigmoid, "tanh": nn.Tanh, "relu": nn.ReLU}


def _build(
    in_shape: tuple[int, int, int],
    num_classes: int,
    strides: list[int],
    init_range: float | None,
    activation: str = "sigmoid",
) -> FeatureClassifier:
    layers: list[nn.Module] = []
    cin = in_shape[0]
    for stride in strides:
        layers += [nn.Conv2d(cin, 12, kernel_size=5, padding=2, stride=stride), ACTIVATIONS[activation]()]
        cin = 12
    features = nn.Sequential(*layers, nn.Flatten())
    model = FeatureClassifier(features, nn.Linear(flat_size(features, in_shape), num_classes))
    if init_range is not None:
        for param in model.parameters():
            nn.init.uniform_(param, -init_range, init_range)
    return model


@MODELS.register(
    "lenet",
    summary="DLG/iDLG LeNet: 3 conv (12 ch, k5, strides 2-2-1), sigmoid, one Linear; U[-0.5,0.5] init",
    reference="Zhu et al., Deep Leakage from Gradients, NeurIPS 2019; Zhao et al., iDLG, 2020",
    params=LeNetParams,
)
def lenet(params: LeNetParams, in_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """32×32 input → 768 features; 28×28 → 588."""
    return _build(in_shape, num_classes, [2, 2, 1], params.init_range, params.activation)


@MODELS.register(
    "lenet4",
    summary="Soteria/CPL LeNet: 4 conv (12 ch, k5, strides 2-2-1-1), sigmoid, one Linear",
    reference="Sun et al., Soteria, CVPR 2021; Wei et al., CPL, ESORICS 2020",
    params=LeNetParams,
)
def lenet4(params: LeNetParams, in_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    return _build(in_shape, num_classes, [2, 2, 1, 1], params.init_range, params.activation)
