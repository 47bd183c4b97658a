"""What the condensation methods share: the network family they condense with, the synthetic set's
start, and a resumable optimization loop whose checkpoints are fitted artifacts.

The network is the ConvNet of the condensation papers (Zhao et al., ICLR 2021, Sec. 4): ``depth``
blocks of conv 3×3 (``width`` channels) → instance normalization → ReLU → average pooling 2, then a
linear classifier; a fresh random initialization per outer iteration.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from tqdm.auto import tqdm

from leakshield.artifacts import Checkpoints
from leakshield.data.types import DatasetInfo, ImageSet


class CondensationNet(nn.Module):
    """ConvNet-``depth`` with instance norm (DC/DSA/DM's ConvNet); :meth:`embed` is the flattened
    feature before the classifier (DM's embedding)."""

    def __init__(self, info: DatasetInfo, width: int = 128, depth: int = 3) -> None:
        super().__init__()
        channels, side = info.shape[0], info.shape[1]
        layers: list[nn.Module] = []
        for _ in range(depth):
            conv = nn.Conv2d(channels, width, 3, padding=1)
            layers += [conv, nn.GroupNorm(width, width, affine=True), nn.ReLU(), nn.AvgPool2d(2)]
            channels, side = width, max(1, side // 2)
        self.features = nn.Sequential(*layers, nn.Flatten())
        self.classifier = nn.Linear(width * side * side, info.num_classes)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def real_start(data: ImageSet, ipc: int, gen: torch.Generator) -> ImageSet:
    """``ipc`` randomly chosen real images per class the client holds (all of them where it holds
    fewer): DC/DSA/DM's "real" initialization. Classes the client lacks get no synthetic images."""
    xs, ys = [], []
    for c in torch.unique(data.y).tolist():
        idx = (data.y == c).nonzero().flatten()
        pick = idx[torch.randperm(len(idx), generator=gen)[:ipc].to(idx.device)]
        xs.append(data.x[pick])
        ys.append(data.y[pick])
    return ImageSet(torch.cat(xs).clone(), torch.cat(ys).clone())


def class_indices(y: torch.Tensor) -> dict[int, torch.Tensor]:
    """Class → indices of that class in ``y``."""
    return {int(c): (y == c).nonzero().flatten() for c in torch.unique(y)}


def sample(indices: torch.Tensor, count: int, gen: torch.Generator) -> torch.Tensor:
    """``count`` of ``indices`` drawn without replacement (all of them, shuffled, if fewer)."""
    return indices[torch.randperm(len(indices), generator=gen)[:count].to(indices.device)]


def resumable(
    steps: int,
    state: dict[str, torch.Tensor],
    advance: Callable[[int], dict[str, float]],
    checkpoints: Checkpoints,
    *,
    desc: str,
    progress: bool,
    start: int = 0,
) -> None:
    """Run ``advance(step)`` for step = start … steps − 1, ``state`` (tensors updated in place by
    ``advance``, at step ``start`` when called) restored first from the latest checkpoint past ``start``
    and saved every ``checkpoints.every`` steps. ``advance`` draws its randomness from the step number,
    so a resumed loop equals an uninterrupted one."""
    found = checkpoints.latest(steps)
    if found is not None and found[0] > start:
        start, tensors = found
        with torch.no_grad():
            for name, value in state.items():
                value.copy_(tensors[name].to(value.device))
    bar = tqdm(range(start, steps), desc=desc, disable=not progress, leave=False)
    for step in bar:
        losses = advance(step)
        if (step + 1) % checkpoints.every == 0 or step + 1 == steps:
            bar.set_postfix({k: f"{v:.4g}" for k, v in losses.items()})
            checkpoints.save(step + 1, state)
