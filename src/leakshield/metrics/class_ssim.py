"""Class-level SSIM (Luo & Zhang, TKDD 2025, Eq. 5): how well a generator's images of a class resemble
the private images of that class, as a group rather than one by one.

SSIM(X̃, X) = (1/|X̃|) Σ_{x̃ᵢ ∈ X̃} (1/|{xⱼ : yⱼ = ỹᵢ}|) Σ_{yⱼ = ỹᵢ} SSIM(x̃ᵢ, xⱼ)

The convention (stated in reports): a ``window``×``window`` *uniform* window (the paper's 8×8) at every
valid position, K1 = 0.01, K2 = 0.03, data range 1 on [0, 1] pixels, population (co)variances, mean over
positions and channels. With an odd window this is scikit-image's ``structural_similarity(win_size=w,
gaussian_weights=False, use_sample_covariance=False, data_range=1)``; scikit-image refuses even windows,
so the paper's 8×8 is computed here only. All pairs are computed at once, in chunks, as matrix products
of the windows' pixels (no Python loop over pairs).
"""

from __future__ import annotations

import torch
from torch.nn import functional as F


def pairwise_ssim(
    a: torch.Tensor, b: torch.Tensor, *, window: int = 8, chunk: int = 64, k1: float = 0.01, k2: float = 0.03
) -> torch.Tensor:
    """SSIM of every image of ``a`` (Na, C, H, W) with every image of ``b`` (Nb, C, H, W): (Na, Nb)."""
    if a.ndim != 4 or a.shape[1:] != b.shape[1:]:
        raise ValueError(f"pairwise SSIM: shapes {tuple(a.shape)} and {tuple(b.shape)} do not match")
    if min(a.shape[-2:]) < window:
        raise ValueError(
            f"pairwise SSIM: a {window}×{window} window needs larger images than {tuple(a.shape)}"
        )
    c = a.shape[1]
    c1, c2 = k1**2, k2**2

    def windows(x: torch.Tensor) -> torch.Tensor:  # (N, C, P, L): the P pixels of each of L windows
        u = F.unfold(x.double().clamp(0, 1), kernel_size=window)
        return u.view(len(x), c, window * window, -1)

    wb = windows(b)
    mu_b = wb.mean(dim=2)  # (Nb, C, L)
    var_b = wb.pow(2).mean(dim=2) - mu_b.pow(2)
    wb_t = wb.permute(1, 3, 2, 0)  # (C, L, P, Nb)
    rows = []
    for start in range(0, len(a), chunk):
        wa = windows(a[start : start + chunk])
        mu_a = wa.mean(dim=2)
        var_a = wa.pow(2).mean(dim=2) - mu_a.pow(2)
        cross = torch.matmul(wa.permute(1, 3, 0, 2), wb_t) / (window * window)  # (C, L, na, Nb)
        mu_a_, mu_b_ = mu_a.permute(1, 2, 0)[..., None], mu_b.permute(1, 2, 0)[:, :, None, :]
        cov = cross - mu_a_ * mu_b_
        var_a_, var_b_ = var_a.permute(1, 2, 0)[..., None], var_b.permute(1, 2, 0)[:, :, None, :]
        num = (2 * mu_a_ * mu_b_ + c1) * (2 * cov + c2)
        den = (mu_a_.pow(2) + mu_b_.pow(2) + c1) * (var_a_ + var_b_ + c2)
        rows.append((num / den).mean(dim=(0, 1)))
    return torch.cat(rows).float()


def class_level_ssim(
    generated: torch.Tensor,
    generated_labels: torch.Tensor,
    private: torch.Tensor,
    private_labels: torch.Tensor,
    *,
    window: int = 8,
) -> tuple[float, dict[int, float]]:
    """Eq. 5 and its per-class means. Generated images of a class no private image has are left out
    (and a class without generated images has no entry)."""
    per_image: list[torch.Tensor] = []
    per_class: dict[int, float] = {}
    for cls in generated_labels.unique().tolist():
        mine = private[private_labels == cls]
        if not len(mine):
            continue
        scores = pairwise_ssim(generated[generated_labels == cls], mine, window=window).mean(dim=1)
        per_image.append(scores)
        per_class[int(cls)] = float(scores.mean())
    if not per_image:
        raise ValueError("class-level SSIM: no generated image has a class the private images have")
    return float(torch.cat(per_image).mean()), per_class
