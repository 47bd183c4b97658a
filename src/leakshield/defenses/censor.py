"""CENSOR (Zhang et al., *CENSOR: Defense Against Gradient Inversion via Orthogonal Subspace Bayesian
Sampling*, NDSS 2025): the client releases, instead of its minibatch gradient g, a gradient drawn from
the subspace orthogonal to g, layer by layer, and chosen among random candidates by the loss it leaves.

For every candidate t = 1…T and every parameter tensor l: r ~ N(0, I) shaped like g_l, projected off g_l
(Gram–Schmidt, o = r − (⟨r, g_l⟩ / ⟨g_l, g_l⟩)·g_l) and rescaled to g_l's norm, ĝ_l = o·||g_l|| / ||o||.
The candidate kept is the one with the lowest training loss on the client's batch after one step
θ − η·ĝ (the zero-temperature limit of sampling ĝ ∝ exp(−L(θ − η·ĝ)) in the orthogonal subspace: the
paper's "Bayesian sampling"). It replaces g; every released tensor is orthogonal to the true one and
has its norm, so the cosine an inversion attack matches is 0 at the true images.

Choices the paper leaves open or the authors' code makes differently (docs/deviations.md):

* ``projection: exact`` divides by ⟨g_l, g_l⟩; the authors' code divides by ||g_l|| (``projection:
  reference``), which leaves a component along g_l unless ||g_l|| = 1;
* ``fallback``: when no candidate lowers the batch loss below the loss at θ, the authors' code releases
  the true gradient g. That is ``fallback: original``; the default ``best`` releases the best candidate
  anyway, so the release is always orthogonal (the stage notes whether the fallback fired, for the
  minibatch, in the context's ``censor_fallback``; ``benchmarks/censor.py`` counts it over training);
* the candidates' loss is evaluated with the model's buffers read, never updated (train-mode BatchNorm
  keeps its statistics), and in float64 when ``float64_selection`` (η = 1e-4 moves a float32 loss by
  less than its rounding otherwise);
* ``protocol``: the authors' run_rec.py trains the model every epoch on clean minibatch gradients and
  applies CENSOR only to the one gradient it attacks (in the first 10 of 100 epochs, ``until_round:
  10``), stepping the model once along that release. ``protocol: authors`` keeps that split (not the one
  step): CENSOR replaces the gradient of a batch handed to the client from outside (the victim batch an
  attack observes: ``context.indices`` is None) and the client trains clean on the batches it draws
  from its own data. The default ``every-step`` replaces every minibatch gradient the client computes, so the
  federation trains on what is released. An exactly orthogonal release cannot lower the batch's loss to
  first order: measured by ``python benchmarks/censor.py``, a model trained on CENSOR's releases stays
  near chance on digits, and one trained under ``protocol: authors`` is the undefended model.

Parameters: ``candidates`` T (20 in the authors' code), ``eta`` η (1e-4), ``fallback``, ``projection``,
``float64_selection``, ``until_round``, ``protocol``.
"""

from __future__ import annotations

from typing import Literal

import pydantic
import torch
from torch import nn
from torch.func import functional_call

from leakshield.defenses.base import DEFENSES, ClientContext, Defense
from leakshield.gradients import plain_gradient
from leakshield.loss import training_loss
from leakshield.registry import Params


class CensorParams(Params):
    """candidates: T, the random orthogonal gradients drawn per minibatch (20). eta: η, the step of the
    one-step look-ahead that scores a candidate (1e-4). fallback: ``best`` (release the lowest-loss
    candidate always) or ``original`` (the authors' code: release the true gradient when no candidate
    lowers the loss). projection: ``exact`` (Gram–Schmidt) or ``reference`` (the authors' code, not
    orthogonal unless a tensor's gradient has norm 1). float64_selection: score candidates in float64 (True;
    the authors' code scores in float32). until_round: defend rounds 0 … until_round − 1 only and release
    plain gradients after (the authors defend the first 10 of 100 epochs; None: every round). protocol:
    ``every-step`` (every minibatch gradient is CENSOR's release, training included) or ``authors`` (their
    run_rec.py: clean training, CENSOR on the attacked batch only, one handed in from outside)."""

    candidates: int = pydantic.Field(default=20, ge=1)
    eta: float = pydantic.Field(default=1e-4, gt=0)
    fallback: Literal["best", "original"] = "best"
    projection: Literal["exact", "reference"] = "exact"
    float64_selection: bool = True
    until_round: int | None = pydantic.Field(default=None, ge=1)
    protocol: Literal["every-step", "authors"] = "every-step"


def orthogonal_direction(
    g: torch.Tensor, generator: torch.Generator, projection: str = "exact"
) -> torch.Tensor:
    """A random tensor orthogonal to ``g`` with ``g``'s norm: r ~ N(0, I) drawn from ``generator``,
    o = r − (⟨r, g⟩/⟨g, g⟩)·g, returned as o·||g||/||o|| (zeros for a zero ``g``; computed in float64).
    ``projection: reference`` projects as the authors' code does, r/||r|| − (⟨r/||r||, g⟩/||g||)·g,
    which is orthogonal only when ||g|| = 1."""
    r = torch.randn(g.shape, generator=generator, device=generator.device, dtype=torch.float64)
    g64 = g.detach().to(device=r.device, dtype=torch.float64)
    squared = g64.pow(2).sum()
    if squared == 0:
        return torch.zeros_like(g)
    if projection == "reference":
        r = r / r.norm()
        o = r - ((r * g64).sum() / squared.sqrt()) * g64
    else:
        o = r - ((r * g64).sum() / squared) * g64
    return (o * (squared.sqrt() / o.norm().clamp_min(1e-300))).to(device=g.device, dtype=g.dtype)


def batch_loss(model: nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> float:
    """The training loss of ``model`` with ``params`` on (x, y); buffers read from copies, never updated."""
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    with torch.no_grad():
        logits = functional_call(model, {**params, **buffers}, (x,))
        return float(training_loss(model, logits, y))


@DEFENSES.register(
    "censor",
    summary="releases a gradient orthogonal to the true one, layer by layer (same norms), chosen among "
    "20 random candidates by the batch loss one step along it [T 20, η 1e-4]",
    reference="Zhang et al., CENSOR: Defense Against Gradient Inversion via Orthogonal Subspace Bayesian "
    "Sampling, NDSS 2025",
    params=CensorParams,
)
class Censor(Defense):
    """Gradient stage: the CENSOR gradient of each minibatch, or under ``protocol: authors`` of the
    attacked batch only (module docstring)."""

    params: CensorParams
    replaces_gradient = True

    def gradient(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, context: ClientContext
    ) -> dict[str, torch.Tensor]:
        g = plain_gradient(model, x, y)
        if self.params.until_round is not None and context.round >= self.params.until_round:
            return g
        if self.params.protocol == "authors" and context.indices is not None:
            return g  # a batch the client drew from its own data: the federation trains on it clean
        released, fell_back = censor_gradient(model, x, y, g, self.params, context.generator)
        context.notes["censor_fallback"] = torch.tensor(float(fell_back))
        return released


def censor_gradient(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    g: dict[str, torch.Tensor],
    params: CensorParams,
    generator: torch.Generator,
) -> tuple[dict[str, torch.Tensor], bool]:
    """CENSOR's release for the minibatch gradient ``g`` (module docstring) and whether the fallback
    fired (no candidate lowered the loss; the release is ``g`` itself only under ``fallback: original``)."""
    dtype = torch.float64 if params.float64_selection else None
    weights = {k: v.detach() for k, v in model.named_parameters()}
    scored = model if dtype is None else _as(model, dtype)
    xs = x if dtype is None else x.to(dtype)
    base = {k: v.to(dtype) if dtype else v for k, v in weights.items()}
    start = batch_loss(scored, base, xs, y)
    best, best_loss = None, float("inf")
    for _ in range(params.candidates):
        candidate = {k: orthogonal_direction(v, generator, params.projection) for k, v in g.items()}
        stepped = {k: w - params.eta * candidate[k].to(w.dtype) for k, w in base.items()}
        loss = batch_loss(scored, stepped, xs, y)
        if loss < best_loss:
            best, best_loss = candidate, loss
    assert best is not None
    fell_back = not best_loss < start
    if fell_back and params.fallback == "original":
        return {k: v.detach().clone() for k, v in g.items()}, True
    return best, fell_back


def _as(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """A copy of ``model`` in ``dtype`` (the scoring runs on it; the client's model is untouched)."""
    import copy

    return copy.deepcopy(model).to(dtype)
