"""The first check of every client guard: a received model with a NaN or infinite entry is refused
before any statistic is computed on it. A NaN compares false with every threshold, so a guard that
judged such a model would accept it (and a guard that compares rounds would keep it as the reference
the next, tampered model is compared with); a client that trained on it would send NaN back."""

from __future__ import annotations

import math

from torch import nn

from leakshield.defenses.base import Verdict


def non_finite(model: nn.Module, guard: str) -> Verdict | None:
    """A refusal naming the first tensor of ``model``'s state (parameters and buffers) that holds a NaN
    or an infinite value, or None when every entry is finite."""
    for name, tensor in model.state_dict().items():
        if not (tensor.is_floating_point() or tensor.is_complex()):
            continue  # integer buffers (a BatchNorm's step count) are finite by construction
        finite = tensor.isfinite()
        if not bool(finite.all()):
            bad = int((~finite).sum())
            return Verdict(
                False,
                f"{guard}: {name!r} holds {bad} non-finite value(s) of {tensor.numel()} (NaN or ±inf); "
                "a model must be finite to be judged",
                math.inf,
            )
    return None
