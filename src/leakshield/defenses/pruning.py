"""Magnitude pruning (gradient compression) of the released update (or, at ``stage: step``, of every
local gradient): the GradPruning baseline of DLG
(Zhu et al. 2019, Sec. 5), LODA, PRECODE and DCS²."""

from __future__ import annotations

import math
from typing import Literal

import pydantic
import torch

from leakshield.defenses.base import DEFENSES, ClientContext
from leakshield.defenses.perturbation_stage import StagedPerturbation, StageParams


class PruningParams(StageParams):
    """ratio: fraction p of entries set to 0, the smallest in magnitude (papers: 0.7, 0.9, 0.95, 0.99).
    scope: ``tensor`` prunes p of every tensor; ``global`` prunes p of all entries with one threshold.
    stage: ``release`` (the update) or ``step`` (every minibatch gradient)."""

    ratio: float = pydantic.Field(default=0.9, ge=0, lt=1)
    scope: Literal["tensor", "global"] = "tensor"


def keep_largest(values: torch.Tensor, ratio: float) -> torch.Tensor:
    """A boolean mask keeping the ⌈(1 − ratio)·n⌉ entries of largest magnitude (exact count, ties broken
    by position)."""
    flat = values.abs().flatten()
    keep = math.ceil((1 - ratio) * flat.numel())
    mask = torch.zeros_like(flat, dtype=torch.bool)
    if keep > 0:
        mask[torch.topk(flat, keep, sorted=False).indices] = True
    return mask.view_as(values)


@DEFENSES.register(
    "pruning",
    summary="zeroes the fraction p of update entries smallest in magnitude [p 0.9, per tensor]",
    reference="Zhu et al., Deep Leakage from Gradients, NeurIPS 2019, Sec. 5; LODA Table 1; PRECODE Table 2",
    params=PruningParams,
    aliases={"compression": {}, "pruning-global": {"scope": "global"}},
)
class Pruning(StagedPerturbation):
    """Zero the smallest-magnitude entries of the update (of each local gradient at ``stage: step``).
    The adaptive attack (``pruning-aware``) matches only the released, non-zero entries."""

    params: PruningParams

    def perturb(self, update: dict[str, torch.Tensor], context: ClientContext) -> dict[str, torch.Tensor]:
        p = self.params.ratio
        if self.params.scope == "tensor":
            return {k: v * keep_largest(v, p) for k, v in update.items()}
        names = list(update)
        flat = torch.cat([update[k].flatten() for k in names])
        mask = keep_largest(flat, p)
        out, start = {}, 0
        for k in names:
            n = update[k].numel()
            out[k] = update[k] * mask[start : start + n].view_as(update[k])
            start += n
        return out
