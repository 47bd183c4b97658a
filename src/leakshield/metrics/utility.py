"""Utility metrics: test accuracy and accuracy degradation."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from leakshield.data.types import ImageSet


@torch.no_grad()
def accuracy(
    model: nn.Module,
    data: ImageSet,
    *,
    normalize: Callable[[torch.Tensor], torch.Tensor],
    batch_size: int = 512,
    seed: int = 0,
) -> float:
    """Top-1 accuracy of ``model`` (eval mode) on ``data``; the model's mode is restored after. Layers
    that sample at inference (PRECODE's bottleneck) draw from torch's global RNG seeded with ``seed``
    (and restored after), so the figure is reproducible."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    correct = 0
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        for start in range(0, len(data), batch_size):
            x = data.x[start : start + batch_size].to(device)
            y = data.y[start : start + batch_size].to(device)
            correct += int((model(normalize(x)).argmax(dim=1) == y).sum())
    model.train(was_training)
    return correct / max(len(data), 1)


def accuracy_degradation(acc_clean: float, acc_defended: float) -> float:
    """ADR = (acc_clean − acc_defended) / acc_clean (Anti-GAN, Sec. 5.1); NaN if acc_clean is 0."""
    if acc_clean == 0 or math.isnan(acc_clean):
        return math.nan
    return (acc_clean - acc_defended) / acc_clean
