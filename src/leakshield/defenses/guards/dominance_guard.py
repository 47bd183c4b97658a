"""A client guard that reads what its own data would send: before training, the client computes, for
every output unit of every linear and convolutional layer, how its gradient splits over the client's
samples, and refuses a model in which many units' gradients come from one sample alone. That is the
separation every attack on large batches and aggregates needs — trap weights (Boenisch et al., EuroS&P
2023) calibrate first-layer units to fire for one sample, feature fishing (Wen et al., ICML 2022) cuts
the classifier so that one sample speaks, an imprint bin (Fowl et al., ICLR 2022) between two samples'
brightness holds one — while an honest layer's unit mixes many samples. It is the activation side of
client-side detection (Carletti et al., IEEE S&P 2026: statistically improbable structures; *Hear No
Evil*, 2025), computed on the client's data rather than on the weights alone.

For a linear layer y = Wx + b, sample i's gradient on unit k is δ_ik·(x_i, 1), of squared norm
δ_ik²(‖x_i‖² + 1); for a convolution, the per-sample filter gradient from unfolded patches. Two checks:

- *units one sample owns*: a unit is dominated when one sample carries at least ``dominance`` of its
  gradient's energy; units below ``floor`` × the layer's largest are silent and not counted. Refused
  when a layer with at least ``min_units`` live units has a share ``fraction`` of them dominated (trap
  weights: 80 % of the first layer's units on 23 digits; honest rounds 5–11 %).
- *gradient blocked below the classifier*: how many of the client's samples carry a layer's gradient,
  the participation ratio (Σ_i e_i)² / (n·Σ_i e_i²) of the samples' energies e_i, relative to the
  largest over layers (the output layer's, where every sample speaks). Honest layers stay within a
  factor of about 1.3 of one another; class fishing blocks every sample but the fished class's below
  the classifier (0.09–0.13), feature fishing all but one or none (a silent layer: 0). Refused when a
  layer falls to ``blocking`` or below.

Parameters: ``dominance`` (0.9), ``fraction`` (0.25), ``blocking`` (0.3), ``floor`` (1e-6),
``min_units`` (4), ``batch``: the size of the batches of the client's samples it probes (16: set it to
the client's training batch size, since a gradient leaks per batch) and ``batches`` (4): the statistics
are means over them (one forward and backward pass each, the cost of as many training steps). The
verdict's score is the larger of share / ``fraction`` and ``blocking`` / relative participation: 1 or
more is refused."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pydantic
import torch
import torch.nn.functional as F
from torch import nn

from leakshield.defenses.base import ACCEPTED, DEFENSES, ClientContext, Defense, Verdict
from leakshield.defenses.guards.finite_check import non_finite
from leakshield.defenses.guards.guard_probe import probe_batch
from leakshield.registry import Params


class DominanceGuardParams(Params):
    """dominance: one sample's share of a unit's gradient energy that dominates it. fraction: share of
    dominated live units refused. blocking: a layer's participation relative to the largest at or below
    which the model is refused. floor: live-unit energy floor. min_units: live units a layer needs.
    batch: the size of the batches of the client's samples it probes (the client's training batch size:
    a gradient leaks per batch). batches: how many it probes; the statistics are their means."""

    dominance: float = pydantic.Field(default=0.9, gt=0.5, le=1, description="one sample's energy share")
    fraction: float = pydantic.Field(default=0.25, gt=0, le=1, description="dominated units refused")
    blocking: float = pydantic.Field(default=0.3, ge=0, lt=1, description="relative participation refused")
    floor: float = pydantic.Field(default=1e-6, ge=0, lt=1, description="live-unit energy floor")
    min_units: int = pydantic.Field(default=4, ge=1, description="live units a layer needs")
    batch: int = pydantic.Field(default=16, ge=2, description="samples per probed batch")
    batches: int = pydantic.Field(default=4, ge=1, description="batches probed")


def per_sample_unit_energy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """For each linear and 2-D convolutional layer: the squared norm of each sample's gradient on each
    output unit (samples × units), from one forward and backward pass of the summed loss."""
    inputs: dict[str, torch.Tensor] = {}
    outputs: dict[str, torch.Tensor] = {}
    modules = {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear | nn.Conv2d)}

    def keep(name: str):
        def hook(_m: nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
            inputs[name] = args[0].detach()
            out.retain_grad()
            outputs[name] = out

        return hook

    handles = [m.register_forward_hook(keep(n)) for n, m in modules.items()]
    was_training = model.training
    model.eval()
    try:
        with torch.enable_grad():
            loss = F.cross_entropy(model(x), y, reduction="sum")
            live = [o for o in outputs.values() if o.requires_grad]
            grads = torch.autograd.grad(loss, live, allow_unused=True) if live else []
    finally:
        model.train(was_training)
        for h in handles:
            h.remove()
    by_output = dict(zip([id(o) for o in live], grads, strict=True))
    energy = {}
    for name, module in modules.items():
        out = outputs.get(name)
        delta = by_output.get(id(out)) if out is not None else None
        if delta is None:
            continue
        delta, a = delta.double(), inputs[name].double()
        bias = 1.0 if module.bias is not None else 0.0
        if isinstance(module, nn.Linear):
            delta, a = delta.reshape(len(x), -1, delta.shape[-1]), a.reshape(len(x), -1, a.shape[-1])
            if delta.shape[1] == 1:  # one input row per sample: ‖δ_ik x_i‖² = δ_ik² ‖x_i‖²
                weight = delta[:, 0].pow(2) * a[:, 0].pow(2).sum(-1, keepdim=True)
            else:
                weight = torch.einsum("ntk,nti->nki", delta, a).pow(2).sum(-1)  # per-sample weight gradient
            energy[name] = weight + bias * delta.sum(1).pow(2)
        else:
            patches = F.unfold(a, module.kernel_size, module.dilation, module.padding, module.stride)
            d = delta.flatten(2)  # samples × filters × positions
            g = torch.einsum("nkp,ncp->nkc", d, patches)
            energy[name] = g.pow(2).sum(-1) + bias * d.sum(-1).pow(2)
    return energy


def dominated_share(energy: torch.Tensor, dominance: float, floor: float) -> tuple[float, int]:
    """(share of live units one sample dominates, live units) for samples × units energies."""
    total = energy.sum(0)
    live = total > floor * total.max().clamp_min(1e-300)
    if not bool(live.any()):
        return 0.0, 0
    top = energy.max(0).values
    dominated = (top >= dominance * total) & live
    return float(dominated.sum() / live.sum()), int(live.sum())


def relative_participation(energies: dict[str, torch.Tensor]) -> dict[str, float]:
    """Per layer: the participation ratio of the samples' gradient energies (1: every sample alike,
    1/n: one sample), over the largest of the model's layers; a silent layer gives 0."""
    ratios = {}
    for name, energy in energies.items():
        e = energy.sum(1)
        ratios[name] = float(e.sum() ** 2 / (len(e) * e.pow(2).sum())) if float(e.sum()) > 0 else 0.0
    top = max(ratios.values(), default=0.0)
    return {n: r / top for n, r in ratios.items()} if top > 0 else {}


def batch_statistics(
    model: nn.Module, batches: Sequence[tuple[torch.Tensor, torch.Tensor]], p: DominanceGuardParams
) -> tuple[dict[str, float], dict[str, float]]:
    """The guard's two statistics per layer, means over ``batches`` of (normalized inputs, labels): the
    share of live units one sample owns (0 where fewer than ``min_units`` are live), and the relative
    participation. The detection-aware trap weights compute it on public batches."""
    shares: dict[str, list[float]] = {}
    lows: dict[str, list[float]] = {}
    for xb, yb in batches:
        energies = per_sample_unit_energy(model, xb, yb)
        for name, energy in energies.items():
            share, live = dominated_share(energy, p.dominance, p.floor)
            shares.setdefault(name, []).append(share if live >= p.min_units else 0.0)
        for name, low in relative_participation(energies).items():
            lows.setdefault(name, []).append(low)
    return {n: sum(v) / len(v) for n, v in shares.items()}, {n: sum(v) / len(v) for n, v in lows.items()}


@DEFENSES.register(
    "dominance-guard",
    summary="client guard: refuses a received model in which one of the client's samples alone makes the "
    "gradient of many units (trap weights) or that blocks most samples' gradient below the classifier "
    "(fishing) [90 % of a unit's energy in ≥ 25 % of units; participation ≤ 0.3 of the largest]",
    reference="Carletti et al., IEEE S&P 2026 and Hear No Evil, 2025 (client-side detection); Boenisch et "
    "al., EuroS&P 2023 and Wen et al., ICML 2022 (the separation it detects)",
    params=DominanceGuardParams,
)
class DominanceGuard(Defense):
    """Guard stage: one forward and backward pass over up to ``samples`` of the client's data."""

    params: DominanceGuardParams
    guards = True

    def inspect(self, model: nn.Module, context: ClientContext) -> Verdict:
        if (refused := non_finite(model, "dominance-guard")) is not None:
            return refused
        p = self.params
        x, y = probe_batch(model, context, p.batch * p.batches)
        if len(x) < 2:
            return ACCEPTED  # one sample dominates everything: nothing to judge
        size = min(p.batch, len(x))  # full batches only: a small remainder would look dominated
        batches = list(zip(x.split(size)[: len(x) // size], y.split(size)[: len(x) // size], strict=True))
        mean_share, mean_low = batch_statistics(model, batches, p)
        if not mean_low:  # every layer's energy zero or not finite: a NaN would pass both tests below
            return Verdict(
                False,
                "dominance-guard: no layer passes a finite, non-zero gradient of this client's data (the "
                "model overflows or is dead), so it cannot be judged",
                math.inf,
            )
        where, worst = max(mean_share.items(), key=lambda kv: kv[1], default=("", 0.0))
        blocked, low = min(mean_low.items(), key=lambda kv: kv[1], default=("", 1.0))
        score = max(worst / p.fraction, p.blocking / max(low, 1e-12))
        if worst >= p.fraction:
            return Verdict(
                False,
                f"dominance-guard: in layer {where!r}, one sample of a batch of {size} of this client's "
                f"makes {p.dominance:.0%} of the gradient of {worst:.0%} of the live units (refused from "
                f"{p.fraction:.0%})",
                score,
            )
        if low <= p.blocking:
            return Verdict(
                False,
                f"dominance-guard: layer {blocked!r} receives the gradient of {low:.0%} as many of this "
                f"client's samples as the layer most of them reach (refused at {p.blocking:.0%} or below: "
                "the gradient is blocked for most samples)",
                score,
            )
        return Verdict(True, score=score)
