"""A client guard that compares the model it receives with the one it accepted the round before:
honest training moves each parameter tensor by a step (lr × an averaged gradient, a few local epochs),
while a malicious server that rewrites a layer moves it by its whole size — trap weights replace the
first layer, fishing zeroes the classifier's rows and sets their biases to 1000, SEER replaces every
parameter, imprint and LOKI change the architecture itself. The checks of the received parameters
against the previous round's model that client-side detection proposes (Carletti et al., *On the
Detectability of Active Gradient Inversion Attacks in Federated Learning*, IEEE S&P 2026: weight-space
anomalies), reduced to two statistics per parameter tensor:

- *relative change* ‖θ − θ′‖ / max(‖θ′‖, ``floor`` · √n) of the tensor θ against the previous θ′ (n
  entries; the floor keeps near-zero biases from dividing by nothing); refused above ``change``;
- *new zeros*: the rise in the share of entries that are exactly zero; refused above ``sparsity``.

A model whose parameter names or shapes differ from the previous one is refused outright. Without a
previous model (the client's first round, or a harness that does not know it) the guard accepts: it
has nothing to compare. The client keeps the last model it accepted (one copy, only when this guard is
configured); leakshield's detection and attack cells hand it the honest model of the round before.

Parameters: ``change`` (0.5), ``sparsity`` (0.25), ``floor`` (0.01)."""

from __future__ import annotations

import math

import pydantic
from torch import nn

from leakshield.defenses.base import ACCEPTED, DEFENSES, ClientContext, Defense, Verdict
from leakshield.defenses.guards.finite_check import non_finite
from leakshield.registry import Params


class DriftGuardParams(Params):
    """change: relative change of a parameter tensor refused above. sparsity: rise of its share of exact
    zeros refused above. floor: per-entry norm floor of the previous tensor (near-zero biases)."""

    change: float = pydantic.Field(default=0.5, gt=0, description="relative change refused above")
    sparsity: float = pydantic.Field(default=0.25, gt=0, le=1, description="rise of zeros refused above")
    floor: float = pydantic.Field(default=0.01, ge=0, description="per-entry norm floor")


def drift(model: nn.Module, previous: nn.Module, floor: float) -> dict[str, tuple[float, float]]:
    """Per parameter tensor: (relative change, rise of the share of exact zeros) against ``previous``;
    raises ValueError when names or shapes differ."""
    now, before = dict(model.named_parameters()), dict(previous.named_parameters())
    if {k: tuple(v.shape) for k, v in now.items()} != {k: tuple(v.shape) for k, v in before.items()}:
        raise ValueError("its parameters' names or shapes differ from the previous round's model")
    out = {}
    for name, theta in now.items():
        old = before[name].detach().to(theta.device).double()
        new = theta.detach().double()
        scale = max(float(old.norm()), floor * math.sqrt(old.numel()), 1e-12)
        zeros = float((new == 0).double().mean() - (old == 0).double().mean())
        out[name] = (float((new - old).norm()) / scale, zeros)
    return out


@DEFENSES.register(
    "drift-guard",
    summary="client guard: refuses a received model whose parameters moved far from the model it accepted "
    "the round before, or gained many exact zeros [relative change > 0.5; zeros +25 %]",
    reference="Carletti et al., On the Detectability of Active Gradient Inversion Attacks in Federated "
    "Learning, IEEE S&P 2026 (weight-space anomalies against the previous round)",
    params=DriftGuardParams,
)
class DriftGuard(Defense):
    """Guard stage: one pass over the parameters of the received and the previous model."""

    params: DriftGuardParams
    guards = True
    needs_previous = True

    def inspect(self, model: nn.Module, context: ClientContext) -> Verdict:
        if (refused := non_finite(model, "drift-guard")) is not None:
            return refused  # and never becomes the reference: a client keeps the models it accepted
        if context.previous is None:
            return ACCEPTED  # nothing to compare with (the first round)
        p = self.params
        try:
            stats = drift(model, context.previous, p.floor)
        except ValueError as exc:
            return Verdict(False, f"drift-guard: {exc}", math.inf)
        overflowed = next((n for n, (c, _) in stats.items() if not math.isfinite(c)), None)
        if overflowed is not None:  # a NaN change would compare false with the threshold
            return Verdict(False, f"drift-guard: {overflowed!r} changed by a non-finite amount since the "
                           "previous round", math.inf)  # fmt: skip
        moved, change = max(((n, c) for n, (c, _) in stats.items()), key=lambda kv: kv[1])
        zeroed, zeros = max(((n, z) for n, (_, z) in stats.items()), key=lambda kv: kv[1])
        score = max(change / p.change, zeros / p.sparsity)
        if change > p.change:
            return Verdict(False, f"drift-guard: {moved!r} moved by {change:.2f} of its size since the "
                           f"previous round (refused above {p.change:g})", score)  # fmt: skip
        if zeros > p.sparsity:
            return Verdict(False, f"drift-guard: {zeros:.0%} of {zeroed!r} turned exactly zero since the "
                           f"previous round (refused above {p.sparsity:.0%})", score)  # fmt: skip
        return Verdict(True, score=score)
