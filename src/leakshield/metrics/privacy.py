"""Privacy metrics: matching reconstructions to the truth, attack success rate."""

from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from leakshield.metrics.image import mse, psnr, ssim
from leakshield.metrics.registry import METRICS

MATCHABLE = ("ssim", "psnr", "mse")
DEFAULT_ASR_THRESHOLD = 0.6


def match_reconstructions(
    reconstruction: torch.Tensor, truth: torch.Tensor, metric: str = "ssim"
) -> torch.Tensor:
    """Order ``reconstruction`` to best match ``truth`` (Hungarian assignment on ``metric``).

    Returns the index tensor ``perm`` with ``reconstruction[perm][i]`` assigned to ``truth[i]``. A batch
    of one needs no matching. Both inputs are N×C×H×W in [0, 1]; more reconstructions than truths is
    allowed (the unassigned ones are dropped).
    """
    if metric not in MATCHABLE:
        raise ValueError(f"matching metric {metric!r}; allowed: {', '.join(MATCHABLE)}")
    n_rec, n_true = len(reconstruction), len(truth)
    if n_rec < n_true:
        raise ValueError(f"{n_rec} reconstructions for {n_true} true images")
    if n_true == 1 and n_rec == 1:
        return torch.zeros(1, dtype=torch.long)
    fn = {"ssim": ssim, "psnr": psnr, "mse": mse}[metric]
    rec = reconstruction.unsqueeze(1).expand(n_rec, n_true, *truth.shape[1:]).flatten(0, 1)
    tru = truth.unsqueeze(0).expand(n_rec, n_true, *truth.shape[1:]).flatten(0, 1)
    scores = fn(rec, tru).view(n_rec, n_true).cpu().numpy()
    cost = -scores if METRICS.get(metric).higher_is_better else scores
    cost = np.nan_to_num(cost, nan=1e12, posinf=1e12, neginf=-1e12)
    rows, cols = linear_sum_assignment(cost)
    perm = np.empty(n_true, dtype=np.int64)
    perm[cols] = rows
    return torch.from_numpy(perm)


def attack_success_rate(ssim_values: torch.Tensor, threshold: float = DEFAULT_ASR_THRESHOLD) -> float:
    """Share of images reconstructed with SSIM ≥ ``threshold`` (PRECODE's ASR, threshold 0.6)."""
    if ssim_values.numel() == 0:
        return float("nan")
    return float((ssim_values >= threshold).double().mean())
