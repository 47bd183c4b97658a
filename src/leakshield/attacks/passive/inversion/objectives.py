"""Gradient distances and image priors of gradient inversion.

Distances take the dummy and target updates as lists of tensors (one per matched parameter) and
optional per-layer weights; a weight of 0 drops a layer (adaptive attacks down-weight defended layers).
BatchNorm statistics, GradInversion's prior: :mod:`.batchnorm` (re-exported here).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from leakshield.attacks.passive.inversion.batchnorm import BatchNormStatistics
from leakshield.loss import cross_entropy
from leakshield.models.base import auxiliary_loss


def _weights(n: int, weights: Sequence[float] | None) -> Sequence[float]:
    return weights if weights is not None else [1.0] * n


def _weighted(w: float, term: torch.Tensor) -> torch.Tensor:
    """``w·term``; a weight of 1 adds no operation (one kernel per layer and step, twice with the
    backward, which a GPU waits on when the model has many small layers)."""
    return term if w == 1.0 else w * term


def l2_distance(
    dummy: Sequence[torch.Tensor], target: Sequence[torch.Tensor], weights: Sequence[float] | None = None
) -> torch.Tensor:
    """Σ_layers w_l·||∇θ' − ∇θ||² (DLG, Zhu et al. 2019, Eq. 4)."""
    w = _weights(len(dummy), weights)
    return sum(_weighted(wi, ((d - t) ** 2).sum()) for d, t, wi in zip(dummy, target, w, strict=True))  # type: ignore[return-value]


def l1_distance(
    dummy: Sequence[torch.Tensor], target: Sequence[torch.Tensor], weights: Sequence[float] | None = None
) -> torch.Tensor:
    """Σ_layers w_l·||∇θ' − ∇θ||₁ (ATS's Adam + L1 variant; the negative log-likelihood of Laplacian
    noise)."""
    w = _weights(len(dummy), weights)
    return sum(_weighted(wi, (d - t).abs().sum()) for d, t, wi in zip(dummy, target, w, strict=True))  # type: ignore[return-value]


def cosine_distance(
    dummy: Sequence[torch.Tensor], target: Sequence[torch.Tensor], weights: Sequence[float] | None = None
) -> torch.Tensor:
    """1 − ⟨g', g⟩_w / (||g'||_w·||g||_w) over all layers concatenated (Inverting Gradients, Eq. 4), with
    layer l's entries weighted by w_l."""
    w = _weights(len(dummy), weights)
    dot = sum(_weighted(wi, (d * t).sum()) for d, t, wi in zip(dummy, target, w, strict=True))
    norm_d = sum(_weighted(wi, d.pow(2).sum()) for d, wi in zip(dummy, w, strict=True))
    norm_t = sum(_weighted(wi, t.pow(2).sum()) for t, wi in zip(target, w, strict=True))
    return 1 - dot / (norm_d.sqrt() * norm_t.sqrt() + 1e-12)  # type: ignore[union-attr]


#: dummy update, target update, per-layer weights → distance
Distance = Callable[[Sequence[torch.Tensor], Sequence[torch.Tensor], Sequence[float] | None], torch.Tensor]

DISTANCES: dict[str, Distance] = {"l2": l2_distance, "l1": l1_distance, "cosine": cosine_distance}


def task_loss(
    model: nn.Module, logits: torch.Tensor, labels: torch.Tensor, logit_gradient: bool = False
) -> torch.Tensor:
    """The client's loss for the forward of ``model`` that gave ``logits`` (cross-entropy plus the model's
    auxiliary terms, e.g. PRECODE's KL), or with ``logit_gradient`` the surrogate Σ z·(∂L/∂z) + auxiliary
    terms whose θ-gradient equals the client's (``labels`` then holds ∂L/∂z, a constant; labels 'bias')."""
    if logit_gradient:
        return (logits * labels.detach()).sum() + auxiliary_loss(model)
    return cross_entropy(logits, labels) + auxiliary_loss(model)


def total_variation(x: torch.Tensor) -> torch.Tensor:
    """Anisotropic TV: mean|∂x/∂h| + mean|∂x/∂w| (Inverting Gradients' prior)."""
    dx = (x[:, :, :, 1:] - x[:, :, :, :-1]).abs().mean()
    dy = (x[:, :, 1:, :] - x[:, :, :-1, :]).abs().mean()
    return dx + dy


def image_norm(x: torch.Tensor) -> torch.Tensor:
    """Mean squared value of the (normalized) image: the L2 prior of GradInversion/DeepInversion."""
    return x.pow(2).mean()


__all__ = [
    "DISTANCES",
    "BatchNormStatistics",
    "Distance",
    "cosine_distance",
    "image_norm",
    "l1_distance",
    "l2_distance",
    "task_loss",
    "total_variation",
]
