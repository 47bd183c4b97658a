"""CIFAR-style ResNets (He et al., CVPR 2016) as used by Inverting Gradients and ATS."""

from __future__ import annotations

import pydantic
import torch
from torch import nn

from leakshield.models.base import FeatureClassifier
from leakshield.models.registry import MODELS
from leakshield.registry import Params


class BasicBlock(nn.Module):
    """Two 3×3 conv + BN, identity or 1×1-conv shortcut; no in-place ops (Opacus-safe)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


def _resnet(
    in_shape: tuple[int, int, int], num_classes: int, blocks: list[int], base: int
) -> FeatureClassifier:
    layers: list[nn.Module] = [
        nn.Conv2d(in_shape[0], base, 3, padding=1, bias=False),
        nn.BatchNorm2d(base),
        nn.ReLU(),
    ]
    cin = base
    for stage, count in enumerate(blocks):
        cout = base * 2**stage
        for i in range(count):
            layers.append(BasicBlock(cin, cout, stride=2 if stage > 0 and i == 0 else 1))
            cin = cout
    features = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
    model = FeatureClassifier(features, nn.Linear(cin, num_classes))
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(module, nn.BatchNorm2d):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
    return model


class ResNet20Params(Params):
    """width: base width (16 = ResNet20, 64 = ATS's ResNet20-4); depth_blocks: blocks per stage
    (3 = ResNet20, 5 = ResNet32)."""

    width: int = pydantic.Field(default=16, ge=1)
    depth_blocks: int = pydantic.Field(default=3, ge=1)


class ResNet18Params(Params):
    """width: base width (64 in ResNet-18)."""

    width: int = pydantic.Field(default=64, ge=1)


@MODELS.register(
    "resnet20",
    summary="CIFAR ResNet20: 3 stages × 3 BasicBlocks, widths 16/32/64, global pool, Linear",
    reference="He et al., CVPR 2016; ATS (Gao et al., CVPR 2021) uses width 64 (ResNet20-4)",
    params=ResNet20Params,
    aliases={"resnet20-4": {"width": 64}, "resnet32": {"depth_blocks": 5}},
)
def resnet20(params: ResNet20Params, in_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    return _resnet(in_shape, num_classes, [params.depth_blocks] * 3, params.width)


@MODELS.register(
    "resnet18",
    summary="ResNet-18 with the CIFAR stem (conv3×3, no max-pool), 4 stages × 2 BasicBlocks",
    reference="He et al., CVPR 2016; Geiping et al., Inverting Gradients, NeurIPS 2020",
    params=ResNet18Params,
)
def resnet18(params: ResNet18Params, in_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    return _resnet(in_shape, num_classes, [2, 2, 2, 2], params.width)
