"""A client guard against models built to separate samples: it refuses a received model in which a
weight layer's rows (a linear layer's output rows, a convolution's flattened filters) are near-duplicates
of one another. Honest initializations and training keep rows far apart (random rows in dimension d have
|cos| ≈ 1/√d); a malicious server's imprint block (Fowl et al., *Robbing the Fed*, ICLR 2022) repeats
one linear query in every row so that its biases sort samples into cumulative bins, and its spreading
layer repeats one row too. A first, simple check of the guard stage (the checks of Carletti et al.,
IEEE S&P 2026, and of *Hear No Evil*, 2025, go further)."""

from __future__ import annotations

import pydantic
import torch
from torch import nn

from leakshield.defenses.base import ACCEPTED, DEFENSES, ClientContext, Defense, Verdict
from leakshield.defenses.guards.finite_check import non_finite
from leakshield.registry import Params

#: rows compared per layer at most (a seeded sample above it keeps the check well under a training step)
MAX_ROWS = 512


class RowGuardParams(Params):
    """similarity: |cosine| between two rows at which they count as near-duplicates (0.99). fraction: share
    of a layer's row pairs that are near-duplicates at which the model is refused (0.5). min_rows: layers
    with fewer rows (a 2-output head) are not judged."""

    similarity: float = pydantic.Field(default=0.99, gt=0, le=1)
    fraction: float = pydantic.Field(default=0.5, gt=0, le=1)
    min_rows: int = pydantic.Field(default=4, ge=2)


def duplicate_share(weight: torch.Tensor, similarity: float) -> float:
    """Share of distinct row pairs of ``weight`` (rows = output units) whose |cosine| ≥ ``similarity``;
    zero rows count as duplicates of each other (a dead layer separates nothing either)."""
    rows = weight.detach().flatten(1).double()
    if len(rows) > MAX_ROWS:
        rows = rows[torch.randperm(len(rows), generator=torch.Generator().manual_seed(0))[:MAX_ROWS]]
    norms = rows.norm(dim=1, keepdim=True)
    unit = torch.where(norms > 0, rows / norms.clamp_min(1e-300), torch.zeros_like(rows))
    cos = (unit @ unit.T).abs()
    zero = (norms.squeeze(1) == 0).double()
    cos = torch.maximum(cos, zero[:, None] * zero[None, :])
    n = len(rows)
    pairs = n * (n - 1)
    return float(((cos >= similarity).double().sum() - (cos.diagonal() >= similarity).double().sum()) / pairs)


@DEFENSES.register(
    "row-guard",
    summary="client guard: refuses a received model whose weight-layer rows are near-duplicates (the "
    "imprint layout) [|cos| 0.99 over half the row pairs]",
    reference="Fowl et al., Robbing the Fed, ICLR 2022 (the layout it detects); guard stage of leakshield",
    params=RowGuardParams,
)
class RowGuard(Defense):
    """Guard stage: for every linear and convolutional layer with at least ``min_rows`` rows, the share
    of near-duplicate row pairs; refuses when the largest share reaches ``fraction``."""

    params: RowGuardParams
    guards = True

    def inspect(self, model: nn.Module, context: ClientContext) -> Verdict:
        if (refused := non_finite(model, "row-guard")) is not None:
            return refused
        p = self.params
        worst, where = 0.0, ""
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear | nn.Conv1d | nn.Conv2d) and module.weight.shape[0] >= p.min_rows:
                share = duplicate_share(module.weight, p.similarity)
                if share > worst:
                    worst, where = share, name
        if worst >= p.fraction:
            return Verdict(
                False,
                f"row-guard: {worst:.0%} of the row pairs of layer {where!r} are near-duplicates "
                f"(|cos| ≥ {p.similarity}; refused from {p.fraction:.0%})",
                worst,
            )
        return Verdict(True, score=worst) if worst else ACCEPTED
