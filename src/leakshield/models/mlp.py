"""PRECODE's fully connected networks: SMLP (2 hidden layers of 1024) and DMLP (4)."""

from __future__ import annotations

import math

import pydantic
from torch import nn

from leakshield.models.base import FeatureClassifier
from leakshield.models.registry import MODELS
from leakshield.registry import Params


class MLPParams(Params):
    """hidden_layers: 2 (SMLP) or 4 (DMLP), any ≥ 1 allowed; width: units per hidden layer."""

    hidden_layers: int = pydantic.Field(default=2, ge=1)
    width: int = pydantic.Field(default=1024, ge=1)


@MODELS.register(
    "mlp",
    summary="ReLU MLP on the flattened image; SMLP = 2 hidden layers of 1024, DMLP = 4",
    reference="Scheliga et al., PRECODE, WACV 2022 (Sec. 4)",
    params=MLPParams,
    aliases={"smlp": {"hidden_layers": 2}, "dmlp": {"hidden_layers": 4}},
)
def mlp(params: MLPParams, in_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    layers: list[nn.Module] = [nn.Flatten()]
    width_in = math.prod(in_shape)
    for _ in range(params.hidden_layers):
        layers += [nn.Linear(width_in, params.width), nn.ReLU()]
        width_in = params.width
    return FeatureClassifier(nn.Sequential(*layers), nn.Linear(width_in, num_classes))
