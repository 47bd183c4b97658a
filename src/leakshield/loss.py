"""The client's training loss: cross-entropy with hard or soft (mixed) labels, mean over the batch, plus
the auxiliary terms of the model's layers (PRECODE's KL)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from leakshield.models.base import auxiliary_loss


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy; ``targets`` are class indices (N,) or class probabilities (N, C)."""
    if targets.dtype in (torch.int64, torch.int32):
        return F.cross_entropy(logits, targets)
    return -(targets * F.log_softmax(logits, dim=-1)).sum(dim=-1).mean()


def training_loss(model: nn.Module, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The loss a client differentiates: :func:`cross_entropy` of ``logits`` (the output of the forward
    of ``model`` just run) plus the auxiliary losses that forward left (PRECODE Eq. 3: CE + β·KL)."""
    return cross_entropy(logits, targets) + auxiliary_loss(model)
