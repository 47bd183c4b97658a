"""A client guard that reads the received model's loss on the client's own data: a model sent to be
trained should not predict the client's labels far worse than a uniform guess does (cross-entropy
log C). A malicious server that rewrites the classifier to magnify some samples' gradients pays for it
in loss: class and feature fishing (Wen et al., ICML 2022) give every other class a bias of 1000, so the
fished class's samples cost a loss near 1000 each. The check follows the loss side of the client-side
detection of Carletti et al. (*On the Detectability of Active Gradient Inversion Attacks in Federated
Learning*, arXiv 2511.10502, IEEE S&P 2026), who flag anomalous loss dynamics; leakshield's guards
hold no state between rounds, so the reference is the uniform guess, not the client's previous loss.

Parameters: ``ratio``: refuse when the mean loss exceeds this multiple of log C (2; the honest rounds of
a 30-round digits federation measured 1.00 falling to 0.26, fishing 54–57, feature fishing 4–38);
``samples``: how many of the client's samples it reads (64; one forward pass)."""

from __future__ import annotations

import math

import pydantic
import torch
import torch.nn.functional as F
from torch import nn

from leakshield.defenses.base import DEFENSES, ClientContext, Defense, Verdict
from leakshield.defenses.guards.finite_check import non_finite
from leakshield.defenses.guards.guard_probe import probe_batch
from leakshield.registry import Params


class LossGuardParams(Params):
    """ratio: refuse above this multiple of a uniform guess's loss log C. samples: client samples read."""

    ratio: float = pydantic.Field(default=2.0, gt=0, description="refused above ratio × log C")
    samples: int = pydantic.Field(default=64, ge=1, description="client samples read")


def loss_ratio(model: nn.Module, x: torch.Tensor, y: torch.Tensor, num_classes: int) -> float:
    """The model's mean cross-entropy on (x, y) over log C, in eval mode (no dropout, running BN)."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            loss = F.cross_entropy(model(x).double(), y)
    finally:
        model.train(was_training)
    return float(loss) / math.log(num_classes)


@DEFENSES.register(
    "loss-guard",
    summary="client guard: refuses a received model whose loss on the client's data is far above a "
    "uniform guess's (fishing's classifier) [mean CE > 2 log C]",
    reference="Carletti et al., On the Detectability of Active Gradient Inversion Attacks in Federated "
    "Learning, IEEE S&P 2026 (loss dynamics); Wen et al., ICML 2022 (the classifier it detects)",
    params=LossGuardParams,
)
class LossGuard(Defense):
    """Guard stage: one forward pass over up to ``samples`` of the client's data."""

    params: LossGuardParams
    guards = True

    def inspect(self, model: nn.Module, context: ClientContext) -> Verdict:
        if (refused := non_finite(model, "loss-guard")) is not None:
            return refused
        x, y = probe_batch(model, context, self.params.samples)
        ratio = loss_ratio(model, x, y, context.info.num_classes)
        if not math.isfinite(ratio) or ratio > self.params.ratio:
            return Verdict(
                False,
                f"loss-guard: the model's loss on this client's data is {ratio:.1f} × log C, a uniform "
                f"guess's is 1 (refused above {self.params.ratio:g})",
                ratio,
            )
        return Verdict(True, score=ratio)
