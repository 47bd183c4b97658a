"""Differentiable siamese augmentation (Zhao & Bilen, ICML 2021, Sec. 3): the same randomly drawn
transformation is applied to a real and a synthetic batch, with every operation a differentiable tensor
op so the synthetic images receive gradients through it.

The strategy ``color_crop_cutout_flip_scale_rotate`` (DSA's default) draws one of the groups
{color, crop, cutout, flip, scale, rotate} per call; ``color`` applies brightness, saturation and
contrast. Parameters (the reference's): brightness ±0.5 (additive), saturation ×[0, 2], contrast
×[0.5, 1.5], crop/translation ±1/8 of the side, cutout a square of half the side, flip with
probability 0.5, scale ×[0.8, 1.2] per axis, rotation ±15°.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

GROUPS = ("color", "crop", "cutout", "flip", "scale", "rotate")


def _affine(x: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    grid = F.affine_grid(theta, list(x.shape), align_corners=True)
    return F.grid_sample(x, grid, align_corners=True)


def siamese_augment(x: torch.Tensor, seed: int, groups: tuple[str, ...] = GROUPS) -> torch.Tensor:
    """Augment ``x`` (N×C×H×W) with the transformation drawn from ``seed``: one parameter set for the
    whole batch, so a real and a synthetic batch augmented with the same seed get the same transform."""
    gen = torch.Generator().manual_seed(seed)
    group = groups[int(torch.randint(len(groups), (1,), generator=gen))]
    n, device = len(x), x.device

    def uniform(lo: float, hi: float, *shape: int) -> torch.Tensor:
        return (torch.rand(*shape, generator=gen) * (hi - lo) + lo).to(device)

    if group == "color":
        x = x + uniform(-0.5, 0.5, 1, 1, 1, 1)
        mean = x.mean(dim=1, keepdim=True)
        x = (x - mean) * uniform(0.0, 2.0, 1, 1, 1, 1) + mean
        mean = x.mean(dim=(1, 2, 3), keepdim=True)
        return (x - mean) * uniform(0.5, 1.5, 1, 1, 1, 1) + mean
    if group == "flip":
        return torch.flip(x, dims=[3]) if float(torch.rand(1, generator=gen)) < 0.5 else x
    if group == "cutout":
        side = x.shape[-1]
        half = side // 2
        cy, cx = (int(v) for v in torch.randint(side, (2,), generator=gen))
        ys = torch.arange(side, device=device).view(-1, 1)
        xs = torch.arange(side, device=device).view(1, -1)
        keep = ((ys - cy).abs() >= half / 2) | ((xs - cx).abs() >= half / 2)
        return x * keep.to(x.dtype)
    eye = torch.zeros(1, 2, 3)
    eye[0, 0, 0] = eye[0, 1, 1] = 1.0
    theta = eye.clone()
    if group == "crop":
        theta[0, :, 2] = torch.rand(2, generator=gen) * 0.5 - 0.25  # ±1/8 of the side (grid spans 2)
    elif group == "scale":
        theta[0, 0, 0], theta[0, 1, 1] = (float(v) for v in torch.rand(2, generator=gen) * 0.4 + 0.8)
    else:  # rotate
        angle = (float(torch.rand(1, generator=gen)) - 0.5) * 2 * 15 / 180 * math.pi
        theta[0, :, :2] = torch.tensor(
            [[math.cos(angle), math.sin(-angle)], [math.sin(angle), math.cos(angle)]]
        )
    return _affine(x, theta.to(device=device, dtype=x.dtype).expand(n, 2, 3))
