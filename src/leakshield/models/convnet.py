"""The "ConvNet" of Inverting Gradients (Geiping et al., NeurIPS 2020)."""

from __future__ import annotations

import itertools

import pydantic
from torch import nn

from leakshield.models.base import FeatureClassifier, flat_size
from leakshield.models.registry import MODELS
from leakshield.registry import Params


class ConvNetParams(Params):
    """width: the base width w (IG: 64; DCS²: 32)."""

    width: int = pydantic.Field(default=64, ge=1)


def _block(cin: int, cout: int) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]


@MODELS.register(
    "convnet",
    summary="IG ConvNet: 8 conv3×3+BN+ReLU (w,2w,2w,4w,4w,4w,pool3,4w,4w,pool3), Linear(36w)",
    reference="Geiping et al., Inverting Gradients, NeurIPS 2020 (reference code's 8-conv net)",
    params=ConvNetParams,
)
def convnet(params: ConvNetParams, in_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """The reference code lists 9 blocks but a duplicated key leaves 8; leakshield builds those 8."""
    w = params.width
    widths = [in_shape[0], w, 2 * w, 2 * w, 4 * w, 4 * w, 4 * w]
    layers: list[nn.Module] = []
    for cin, cout in itertools.pairwise(widths):
        layers += _block(cin, cout)
    layers += [nn.MaxPool2d(3), *_block(4 * w, 4 * w), *_block(4 * w, 4 * w), nn.MaxPool2d(3)]
    features = nn.Sequential(*layers, nn.Flatten())
    return FeatureClassifier(features, nn.Linear(flat_size(features, in_shape), num_classes))
