"""Reading an imprint block's bins (Fowl et al., *Robbing the Fed*, ICLR 2022): with k rows that share one
linear query and biases at increasing thresholds (a cumulative layout: an input activates every bin whose
threshold its query value exceeds, and each active bin receives the same backpropagated signal δ), the
difference of two consecutive bins' gradients holds exactly the inputs between their thresholds, and one
input alone there comes back as (∇W_i − ∇W_{i+1}) / (∇b_i − ∇b_{i+1}). Shared by the image imprint
attacks and the text track's sequence imprint."""

from __future__ import annotations

import torch


def recover_from_bins(grad_w: torch.Tensor, grad_b: torch.Tensor, limit: int) -> tuple[torch.Tensor, int]:
    """The samples alone in a pair of consecutive bins of a cumulative imprint layout (rows in threshold
    order): (∇W_i − ∇W_{i+1}) / (∇b_i − ∇b_{i+1}), strongest first, at most ``limit``; and how many
    bins held any signal."""
    rows, hits = bin_rows(grad_w, grad_b, limit)
    return rows, len(hits)


def bin_rows(grad_w: torch.Tensor, grad_b: torch.Tensor, limit: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`recover_from_bins`' rows, strongest first, and each one's bin i (its pair is i and i + 1)."""
    grad_w, grad_b = grad_w.double(), grad_b.double()
    # consecutive differences isolate the samples whose query falls between two thresholds
    diff_w = torch.cat([grad_w[:-1] - grad_w[1:], grad_w[-1:]])
    diff_b = torch.cat([grad_b[:-1] - grad_b[1:], grad_b[-1:]])
    strength = diff_b.abs()
    hits = (strength > 1e-10 * strength.max().clamp_min(1e-30)).nonzero().flatten()
    hits = hits[torch.argsort(strength[hits], descending=True)][:limit]
    return diff_w[hits] / diff_b[hits, None], hits


def noise_level(grad_b: torch.Tensor) -> float:
    """The standard deviation of the noise on one bin difference ∇b_i − ∇b_{i+1}, read off the bins
    themselves: most bins hold no sample, so the median |difference| is the noise's (a half-normal's
    median is 0.6745 σ); 0 for noise-free bins."""
    grad_b = grad_b.double()
    return float((grad_b[:-1] - grad_b[1:]).abs().median()) / 0.6745 if len(grad_b) > 1 else 0.0
