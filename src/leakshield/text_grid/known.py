"""What a text attack knows of the defenses from their public parameters (Kerckhoffs): the Gaussian
noise left on its gradient estimate and the relative rounding of the released values."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from leakshield.defenses import DEFENSES


def known_noise_std(
    entries: Sequence[Mapping[str, Any]],
    step_sizes: Sequence[int],
    pool: int,
    lr: float | None = None,
) -> float | None:
    """The standard deviation of the Gaussian noise a defense stack leaves on each entry of the
    attacker's gradient estimate, from the defenses' public parameters, for local steps on minibatches
    of ``step_sizes`` drawn from a client holding ``pool`` texts: ``gaussian-noise`` σ,
    ``laplacian-noise`` √2·b, ``dp-sgd`` σ(b/pool)·C / b on a step of b texts (noise on the sum of b
    clipped per-sample gradients, averaged); stacked noises add in variance. FedSGD (``lr`` None) is one
    step whose gradient is the update. FedAvg with plain SGD (``lr``): the estimate −Δθ / (lr · steps)
    is the steps' mean gradient, so per-step noise averages over the steps and noise on the released
    update shrinks by lr · steps. None without noise. Rescaling (clipping) is not modelled."""
    steps = len(step_sizes)
    at_step = at_release = 0.0
    for entry in entries:
        registered = DEFENSES.get(entry["name"]).name
        params: Any = DEFENSES.validate(entry["name"], entry.get("params"))
        stage = getattr(params, "stage", "release")
        if registered == "dp-sgd":
            at_step += sum((params.sigma(min(1.0, b / pool)) * params.clip / b) ** 2 for b in step_sizes)
            continue
        if registered == "gaussian-noise":
            variance = params.sigma**2
        elif registered == "laplacian-noise":
            variance = 2 * params.scale**2
        else:
            continue
        if stage == "step":
            at_step += variance * steps
        else:
            at_release += variance
    at_step /= steps**2  # the mean of the steps' gradients
    if lr is not None:
        at_release /= (lr * steps) ** 2
    total = at_step + at_release
    return math.sqrt(total) if total > 0 else None


#: the relative rounding of fp16 (round to nearest: half a unit in the last of 11 significant bits)
FP16_ROUNDING = 2.0**-11


def known_rounding(entries: Sequence[Mapping[str, Any]]) -> float | None:
    """The relative rounding a defense stack applies to the released values, from its public parameters:
    fp16 quantization 2⁻¹¹ (int8's per-tensor scale is not relative: None, as for no rounding)."""
    for entry in entries:
        if DEFENSES.get(entry["name"]).name == "quantization":
            params: Any = DEFENSES.validate(entry["name"], entry.get("params"))
            if params.format == "fp16":
                return FP16_ROUNDING
    return None


def step_sizes(batch: int, batch_size: int, epochs: int) -> list[int]:
    """The minibatch sizes of FedAvg's local steps over ``batch`` texts (the last of an epoch short)."""
    one = [batch_size] * (batch // batch_size) + ([batch % batch_size] if batch % batch_size else [])
    return one * epochs
