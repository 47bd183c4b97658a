"""Anti-GAN's two image operations (Luo & Zhang, *Exploiting Defenses against GAN-Based Feature
Inference Attacks in Federated Learning*, TKDD 2025): the window-variance obfuscation loss (Eq. 2) and
the revised mixup of Algorithm 1 (line 17)."""

from __future__ import annotations

import torch
from torch.nn import functional as F


def window_variance_loss(
    images: torch.Tensor, expected: float, window: int = 4, reduction: str = "sum"
) -> torch.Tensor:
    """Eq. 2 averaged over the batch (Algorithm 1, line 9): Σ_i (Var(w_i) − v_e)² over the m
    non-overlapping ``window``×``window`` windows w_i of each image, the variance taken over a window's
    pixels (and channels) on the paper's [−1, 1] pixel scale. ``reduction="mean"`` divides by m (the
    loss then does not grow with the image size). ``images`` are [0, 1] pixels; a border that does not
    fill a whole window is left out."""
    scaled = images * 2 - 1
    windows = F.unfold(scaled, kernel_size=window, stride=window)  # (N, C·s·s, m)
    variance = windows.var(dim=1, unbiased=False)
    per_window = (variance - expected).pow(2)
    if reduction not in ("sum", "mean"):
        raise ValueError(f"reduction {reduction!r}; allowed: sum, mean")
    return (per_window.sum(dim=1) if reduction == "sum" else per_window.mean(dim=1)).mean()


def revised_mixup(real: torch.Tensor, generated: torch.Tensor, mix: float) -> torch.Tensor:
    """x̂ = μ·x + (1 − μ)·x′ for each real image x and a generated image x′ of the same class (every
    real image mixed once, the label kept)."""
    if real.shape != generated.shape:
        raise ValueError(f"mixup: real {tuple(real.shape)} and generated {tuple(generated.shape)} differ")
    return mix * real + (1 - mix) * generated
