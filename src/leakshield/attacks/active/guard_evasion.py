"""Detection-aware variants of active attacks: the malicious server knows the client guards' public
configuration (Kerckhoffs; ``ServerKnowledge.defenses``, else the guard's defaults) and gives up
leakage for stealth, tuning its model on the public split until the guard's statistic stays below the
guard's threshold by a ``margin``.

=======================  ================  ========================================================
attack                   evades            what it gives up
=======================  ================  ========================================================
fishing-stealthy         loss-guard        class fishing with the other classes' bias lowered from
                                           1000 to the largest value whose mean public loss stays
                                           under margin × ratio × log C (nothing, while e^(−bias)
                                           still silences the other classes)
trap-weights-stealthy    dominance-guard   trap weights with the smallest activation rate whose
                                           public batches of the guard's size keep the share of
                                           units one sample owns under margin × fraction (units
                                           then fire for several samples: fewer exact recoveries)
=======================  ================  ========================================================

Neither evades the other guards: fishing still blocks the gradient of every other class below the
classifier (dominance-guard's second check), which is how it isolates its class. Parameters: the base
attack's, and ``margin`` (0.9).
"""

from __future__ import annotations

import math

import pydantic
import torch
from torch import nn

from leakshield.attacks.active.fishing import NON_TARGET_BIAS, FishingAttack, FishingParams, classifier_layer
from leakshield.attacks.active.trap_weights import TrapWeightsAttack, TrapWeightsParams
from leakshield.attacks.base import ATTACKS
from leakshield.defenses.base import PublicDefense
from leakshield.defenses.guards.dominance_guard import DominanceGuardParams, batch_statistics
from leakshield.defenses.guards.loss_guard import LossGuardParams
from leakshield.fl.types import PreparedModel, ServerKnowledge
from leakshield.registry import Params
from leakshield.threats import Adversary, Knowledge, threat

#: a malicious server that changes parameters and reads the clients' guard configuration
STEALTHY_SERVER = threat(
    Adversary.PARAMETER_SERVER,
    (Knowledge.PROTOCOL, Knowledge.PUBLIC_SPLIT, Knowledge.DEFENSES),
    secure_aggregation=True,
)


def guard_params(knowledge: ServerKnowledge, name: str, default: Params) -> Params:
    """The public parameters of the clients' guard ``name`` (its defaults when none is configured)."""
    found = [d for d in knowledge.defenses if isinstance(d, PublicDefense) and d.name == name]
    return found[0].params if found else default


class StealthyFishingParams(FishingParams):
    """margin: the share of the loss guard's threshold the model's public loss may reach."""

    margin: float = pydantic.Field(default=0.9, gt=0, le=1, description="share of the guard's threshold")


@ATTACKS.register(
    "fishing-stealthy",
    summary="adaptive vs loss-guard: class fishing with the other classes' bias lowered until the model's "
    "loss on public data stays under the guard's threshold",
    reference="Wen et al., ICML 2022 (class fishing); Carletti et al., IEEE S&P 2026 (the check evaded)",
    params=StealthyFishingParams,
    threat=STEALTHY_SERVER,
    targets=("loss-guard",),
)
class StealthyFishing(FishingAttack):
    """Class fishing that the loss guard accepts; the bias it sends is in its secrets' model."""

    params: StealthyFishingParams

    def prepare_model(self, model: nn.Module, knowledge: ServerKnowledge) -> PreparedModel:
        prepared = super().prepare_model(model, knowledge)
        sent = prepared.model
        info = knowledge.data_info
        guard = guard_params(knowledge, "loss-guard", LossGuardParams())
        assert isinstance(guard, LossGuardParams)
        limit = self.params.margin * guard.ratio * math.log(info.num_classes)
        _, layer = classifier_layer(sent, info)
        target = self.params.target_class
        public = knowledge.public.to(next(sent.parameters()).device)
        with torch.no_grad():
            z = sent(info.normalize(public.x))[:, target].double()  # the fished logit (others: the bias)
        y = public.y.to(z.device)
        bias = _largest_bias(z, y == target, info.num_classes, limit)
        with torch.no_grad():
            others = torch.arange(info.num_classes, device=layer.bias.device) != target
            layer.bias[others] = bias
        return prepared


def _largest_bias(z: torch.Tensor, fished: torch.Tensor, classes: int, limit: float) -> float:
    """The largest bias B ≤ 1000 of the other classes at which the mean cross-entropy of the public
    samples (fished logit ``z``, the others B) stays at or below ``limit`` (bisection: it grows with B)."""

    def loss(b: float) -> float:
        lse = torch.logaddexp(z, torch.full_like(z, b + math.log(classes - 1)))
        return float(torch.where(fished, lse - z, lse - b).mean())

    if loss(NON_TARGET_BIAS) <= limit:
        return NON_TARGET_BIAS
    low, high = float(z.max()), NON_TARGET_BIAS  # at B = max z the fished class still wins some samples
    if loss(low) > limit:
        return low
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if loss(mid) <= limit else (low, mid)
    return low


class StealthyTrapParams(TrapWeightsParams):
    """margin: the share of the dominance guard's threshold the public batches may reach. rates: the
    activation rates tried, smallest (most revealing) first."""

    margin: float = pydantic.Field(default=0.9, gt=0, le=1, description="share of the guard's threshold")
    rates: list[float] = pydantic.Field(
        default=[0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5], min_length=1, description="rates tried"
    )


@ATTACKS.register(
    "trap-weights-stealthy",
    summary="adaptive vs dominance-guard: trap weights with the smallest activation rate whose units one "
    "public sample owns stay under the guard's threshold",
    reference="Boenisch et al., EuroS&P 2023 (trap weights); Carletti et al., IEEE S&P 2026 (the check "
    "evaded)",
    params=StealthyTrapParams,
    threat=STEALTHY_SERVER,
    targets=("dominance-guard",),
)
class StealthyTrapWeights(TrapWeightsAttack):
    """Trap weights that the dominance guard accepts on public batches of its size."""

    params: StealthyTrapParams

    def prepare_model(self, model: nn.Module, knowledge: ServerKnowledge) -> PreparedModel:
        p = guard_params(knowledge, "dominance-guard", DominanceGuardParams())
        assert isinstance(p, DominanceGuardParams)
        info, public = knowledge.data_info, knowledge.public
        generator = torch.Generator().manual_seed(self.params.seed)
        batches = [torch.randperm(len(public), generator=generator)[: p.batch] for _ in range(p.batches)]
        device = next(model.parameters()).device
        probes = [(info.normalize(public.x[i].to(device)), public.y[i].to(device)) for i in batches]
        prepared = None
        for rate in sorted(self.params.rates):
            plain = TrapWeightsAttack(self.params.model_copy(update={"activation_rate": rate}))
            prepared = plain.prepare_model(model, knowledge)
            shares, _ = batch_statistics(prepared.model, probes, p)  # the guard's statistic, public data
            worst = max(shares.values(), default=0.0)
            if worst < self.params.margin * p.fraction:
                break
        assert prepared is not None
        return prepared
