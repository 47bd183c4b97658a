"""The client's training loss: cross-entropy with hard or soft (mixed) labels, mean over the batch."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy; ``targets`` are class indices (N,) or class probabilities (N, C)."""
    if targets.dtype in (torch.int64, torch.int32):
        return F.cross_entropy(logits, targets)
    return -(targets * F.log_softmax(logits, dim=-1)).sum(dim=-1).mean()
