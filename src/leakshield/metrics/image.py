"""Image-similarity metrics on [0, 1] images, per image (conventions: docs/concepts/metrics.md).

* MSE: mean squared error over pixels and channels; ``mse_normalized``: the same in the model's
  normalized input space (PRECODE's convention).
* PSNR: 10·log10(1 / MSE) on images clamped to [0, 1], data range 1; MSE is floored at 1e-10, so an exact
  reconstruction scores 100 dB rather than infinity.
* SSIM (Wang et al., IEEE TIP 2004): 11×11 Gaussian window, σ = 1.5, K1 = 0.01, K2 = 0.03, population
  covariances, mean over the *valid* region (a border of 5 pixels dropped) and over channels — scikit-image's
  ``structural_similarity(..., gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
  data_range=1)``. torchmetrics' reflect-padded full-map mean differs by up to ~2e-3 on 32×32 images.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

PSNR_MSE_FLOOR = 1e-10
SSIM_WINDOW = 11
SSIM_SIGMA = 1.5


def _check_pair(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if a.shape != b.shape or a.ndim != 4:
        raise ValueError(
            f"expected two N×C×H×W batches of equal shape, got {tuple(a.shape)} and {tuple(b.shape)}"
        )
    return a.detach().double(), b.detach().double()


def mse(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-image mean squared error (N,), no clamping."""
    a, b = _check_pair(a, b)
    return (a - b).pow(2).flatten(1).mean(dim=1)


def mse_normalized(a: torch.Tensor, b: torch.Tensor, std: Sequence[float]) -> torch.Tensor:
    """Per-image MSE (N,) in the model's normalized input space, (x − mean)/std per channel: PRECODE's
    convention (its Table 2 pairs MSE 4.62 with PSNR 5.51 dB); each channel's MSE divided by std²."""
    a, b = _check_pair(a, b)
    scale = torch.as_tensor(list(std), dtype=torch.float64).view(1, -1, 1, 1)
    if scale.shape[1] not in (1, a.shape[1]):
        raise ValueError(f"expected {a.shape[1]} channel std values, got {scale.shape[1]}")
    return ((a - b) / scale).pow(2).flatten(1).mean(dim=1)


def psnr(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-image PSNR in dB (N,) of images clamped to [0, 1], data range 1."""
    a, b = _check_pair(a, b)
    err = (a.clamp(0, 1) - b.clamp(0, 1)).pow(2).flatten(1).mean(dim=1)
    return 10.0 * torch.log10(1.0 / err.clamp_min(PSNR_MSE_FLOOR))


def gaussian_window(size: int = SSIM_WINDOW, sigma: float = SSIM_SIGMA) -> torch.Tensor:
    """Normalized 1-D Gaussian of ``size`` taps (scipy's truncate=3.5 gives 11 taps at σ = 1.5)."""
    coords = torch.arange(size, dtype=torch.float64) - (size - 1) / 2
    kernel = torch.exp(-0.5 * (coords / sigma) ** 2)
    return kernel / kernel.sum()


def ssim(
    a: torch.Tensor, b: torch.Tensor, *, data_range: float = 1.0, k1: float = 0.01, k2: float = 0.03
) -> torch.Tensor:
    """Per-image SSIM (N,) in scikit-image's convention (see module docstring). Images are clamped to
    [0, data_range] first; each side must be at least 11 pixels."""
    a, b = _check_pair(a, b)
    a, b = a.clamp(0, data_range), b.clamp(0, data_range)
    _, c, h, w = a.shape
    if min(h, w) < SSIM_WINDOW:
        raise ValueError(f"SSIM needs images of at least {SSIM_WINDOW}×{SSIM_WINDOW}, got {h}×{w}")
    g = gaussian_window().to(a.device)
    kernel_h = g.view(1, 1, SSIM_WINDOW, 1).expand(c, 1, SSIM_WINDOW, 1)
    kernel_w = g.view(1, 1, 1, SSIM_WINDOW).expand(c, 1, 1, SSIM_WINDOW)

    def blur(t: torch.Tensor) -> torch.Tensor:  # valid separable Gaussian filter, per channel
        return F.conv2d(F.conv2d(t, kernel_h, groups=c), kernel_w, groups=c)

    mu_a, mu_b = blur(a), blur(b)
    var_a = blur(a * a) - mu_a * mu_a
    var_b = blur(b * b) - mu_b * mu_b
    cov = blur(a * b) - mu_a * mu_b
    c1, c2 = (k1 * data_range) ** 2, (k2 * data_range) ** 2
    num = (2 * mu_a * mu_b + c1) * (2 * cov + c2)
    den = (mu_a * mu_a + mu_b * mu_b + c1) * (var_a + var_b + c2)
    return (num / den).flatten(1).mean(dim=1)


def mean_finite(values: torch.Tensor) -> float:
    """Mean over finite entries (NaN if none)."""
    finite = values[torch.isfinite(values)]
    return float(finite.mean()) if finite.numel() else math.nan
