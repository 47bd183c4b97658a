"""Update filters that deployments label "differential privacy" although they add no noise — planted in
the audit's tests and docs so that its verdicts can be checked against a known failure.

:func:`percentile_filter` is the "largest-percentile" policy of Shokri & Shmatikov (*Privacy-Preserving
Deep Learning*, CCS 2015) as shipped in a medical-imaging FL framework's privacy filter: keep the update
entries whose magnitude is above the p-th percentile of the client's update, truncate them to ±γ, zero
the rest. It is deterministic: whatever it hides, it gives no (ε, δ) guarantee for any finite ε."""

from __future__ import annotations

from collections.abc import Callable

import torch

from leakshield.crossdevice.models import Params


def percentile_filter(percentile: float = 10.0, gamma: float = 0.01) -> Callable[[Params], Params]:
    """A filter of a batch of updates (leading client dimension): per client, entries with |Δ| below the
    ``percentile``-th percentile of its |Δ| become 0 and the rest are clamped to [−γ, γ] (defaults: the
    shipped filter's 10 and 0.01)."""
    if not 0 <= percentile < 100:
        raise ValueError(f"percentile {percentile}: in [0, 100)")
    if not gamma > 0:
        raise ValueError(f"gamma {gamma}: > 0")

    def apply(updates: Params) -> Params:
        k = next(iter(updates.values())).shape[0]
        magnitude = torch.cat([t.reshape(k, -1).abs() for t in updates.values()], dim=1)
        cut = torch.quantile(magnitude.float(), percentile / 100, dim=1)
        out = {}
        for name, t in updates.items():
            shape = (k,) + (1,) * (t.dim() - 1)
            out[name] = torch.where(t.abs() >= cut.view(shape), t.clamp(-gamma, gamma), torch.zeros_like(t))
        return out

    return apply
