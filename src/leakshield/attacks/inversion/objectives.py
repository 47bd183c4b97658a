"""Gradient distances and image priors of gradient inversion (SPEC §2.1–2.3)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def l2_distance(dummy: Sequence[torch.Tensor], target: Sequence[torch.Tensor]) -> torch.Tensor:
    """Σ_layers ||∇θ' − ∇θ||² (DLG, Zhu et al. 2019, Eq. 4)."""
    return sum(((d - t) ** 2).sum() for d, t in zip(dummy, target, strict=True))  # type: ignore[return-value]


def cosine_distance(dummy: Sequence[torch.Tensor], target: Sequence[torch.Tensor]) -> torch.Tensor:
    """1 − ⟨g', g⟩ / (||g'||·||g||) over all layers concatenated (Inverting Gradients, Eq. 4)."""
    dot = sum((d * t).sum() for d, t in zip(dummy, target, strict=True))
    norm_d = sum(d.pow(2).sum() for d in dummy)
    norm_t = sum(t.pow(2).sum() for t in target)
    return 1 - dot / (norm_d.sqrt() * norm_t.sqrt() + 1e-12)  # type: ignore[union-attr]


DISTANCES = {"l2": l2_distance, "cosine": cosine_distance}


def total_variation(x: torch.Tensor) -> torch.Tensor:
    """Anisotropic TV: mean|∂x/∂h| + mean|∂x/∂w| (Inverting Gradients' prior)."""
    dx = (x[:, :, :, 1:] - x[:, :, :, :-1]).abs().mean()
    dy = (x[:, :, 1:, :] - x[:, :, :-1, :]).abs().mean()
    return dx + dy


def ig_milestones(iterations: int) -> list[int]:
    """Inverting Gradients' MultiStepLR milestones (γ = 0.1) scaled to the budget: ⌊3N/8⌋, ⌊5N/8⌋,
    ⌊7N/8⌋ in exact arithmetic (the reference's float division gives 1799, 2999, 4203 at N = 4800;
    leakshield gives 1800, 3000, 4200)."""
    return [iterations * 3 // 8, iterations * 5 // 8, iterations * 7 // 8]
