"""Norm clipping of the released update, or at ``stage: step`` of every local gradient (the clipping
baseline; Balunović et al., ICLR 2022, Sec. 5)."""

from __future__ import annotations

import pydantic
import torch

from leakshield.defenses.base import DEFENSES, ClientContext
from leakshield.defenses.perturbation_stage import StagedPerturbation, StageParams


class ClippingParams(StageParams):
    """bound: the largest global L2 norm (over all tensors of the update) that is released unchanged.
    stage: ``release`` (the update) or ``step`` (every minibatch gradient)."""

    bound: float = pydantic.Field(default=4.0, gt=0)


def update_norm(update: dict[str, torch.Tensor]) -> torch.Tensor:
    """Global L2 norm of an update: √Σ_tensors ||Δ_t||²."""
    return torch.sqrt(sum(v.double().pow(2).sum() for v in update.values())).float()  # type: ignore[union-attr]


def clipped(update: dict[str, torch.Tensor], bound: float) -> dict[str, torch.Tensor]:
    """``update``·min(1, bound/||update||) (global L2 norm over all tensors)."""
    norm = float(update_norm(update))
    factor = min(1.0, bound / norm) if norm > 0 else 1.0
    return {k: v * factor for k, v in update.items()}


@DEFENSES.register(
    "clipping",
    summary="scales the update down to global L2 norm ≤ bound [bound 4]",
    reference="Balunović et al., Bayesian Framework for Gradient Leakage, ICLR 2022 (clipping defense)",
    params=ClippingParams,
)
class Clipping(StagedPerturbation):
    """``Δ · min(1, C / ||Δ||₂)`` on the update (or each local gradient at ``stage: step``). At release
    cosine matching is invariant to it (the scale is lost, the direction is not), which is the point of
    the comparison; clipped at every FedAvg step, the update's direction changes too."""

    params: ClippingParams

    def perturb(self, update: dict[str, torch.Tensor], context: ClientContext) -> dict[str, torch.Tensor]:
        return clipped(update, self.params.bound)
