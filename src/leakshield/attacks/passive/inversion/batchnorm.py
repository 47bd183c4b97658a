"""The BatchNorm-statistics prior of GradInversion / DeepInversion (Yin et al., CVPR 2021, Eq. 7) and the
statistics it pulls the dummy batch towards.

In eval mode a BatchNorm layer normalizes with its running statistics, which are then the data's best
summary the server holds. In train mode it normalizes with the *batch's own* statistics b_i and moves its
running ones towards them, r ← (1 − m)·r + m·b_i (momentum None: the cumulative average); a client that
runs in train mode reports its buffers after training, so the server reads the batch statistics back
from before and after. After k train-mode passes (``num_batches_tracked`` counts them),
r_after = (1 − m)^k·r_before + Σ_i m(1 − m)^(k−i)·b_i, so
b̄ = (r_after − (1 − m)^k·r_before) / (1 − (1 − m)^k) is the passes' mean with weights
w_i = m(1 − m)^(k−i) / (1 − (1 − m)^k) (equal weights for momentum None). The prior compares the same
weighted mean of the dummy batch's passes with b̄ when the replay runs k passes (exact for one client's
FedSGD gradient, and for FedAvg when the attacker replays the client's minibatches in its order), else
each pass with b̄. Under secure aggregation the buffers are the clients' mean, and a data-stage defense
(DCS²'s concealed samples) adds its own images to the pass: then b̄ is not the victim batch's alone.
Matching the running statistics instead, as an eval-mode prior does, pulls a train-mode reconstruction
towards the global model's statistics (at round 0 a mean of 0 and a variance of 1 at every layer).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from leakshield.fl.types import ServerView


@dataclass(frozen=True)
class BatchNormTarget:
    """The per-channel statistics a BatchNorm layer's input should have: its mean and its variance,
    the variance unbiased (as train-mode BatchNorm stores it) when ``unbiased``."""

    mean: torch.Tensor
    var: torch.Tensor
    unbiased: bool
    #: the weights of the client's passes whose weighted mean ``mean`` and ``var`` are (None: compare
    #: every pass with them)
    weights: torch.Tensor | None = None


def _running(m: nn.modules.batchnorm._BatchNorm) -> BatchNormTarget:
    """The layer's running statistics now, the eval-mode target."""
    return BatchNormTarget(m.running_mean.detach().clone(), m.running_var.detach().clone(), False)


def _batchnorm_layers(model: nn.Module) -> dict[str, nn.modules.batchnorm._BatchNorm]:
    return {
        name: m
        for name, m in model.named_modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is not None
    }


def batchnorm_targets(
    model: nn.Module, view: ServerView, *, attack: str = "gradinversion"
) -> dict[str, BatchNormTarget]:
    """The statistics each BatchNorm layer of ``model`` (the view's model or a copy) should see: the
    running statistics when the client ran in eval mode; in train mode the batch statistics read back
    from the update's buffers (module docstring). Raises ValueError (one line) when train-mode buffers
    are missing, no pass ran, or a layer's momentum is outside (0, 1] (None, the cumulative average, is
    read too)."""
    layers = _batchnorm_layers(model)
    if view.update.protocol.model_mode == "eval":
        return {name: _running(m) for name, m in layers.items()}
    after, before = view.update.buffers, view.update.global_params
    targets = {}
    for name, m in layers.items():
        keys = [f"{name}.{b}" for b in ("running_mean", "running_var", "num_batches_tracked")]
        if any(k not in after or k not in before for k in keys):
            raise ValueError(
                f"{attack}: the client ran BatchNorm in train mode but its update carries "
                f"no statistics of layer {name!r} (buffers) to read its batch's from"
            )
        passes = int(after[keys[2]]) - int(before[keys[2]])
        if passes < 1:
            raise ValueError(
                f"{attack}: BatchNorm layer {name!r} ran no train-mode pass "
                "(num_batches_tracked unchanged); its statistics are not the batch's"
            )
        if m.momentum is None:  # the cumulative average over t passes: t·r = Σ b_i
            start = float(before[keys[2]])
            old = start / (start + passes)
            weights = torch.full((passes,), 1.0 / passes)
        else:
            momentum = float(m.momentum)
            if not 0 < momentum <= 1:
                raise ValueError(
                    f"{attack}: BatchNorm layer {name!r} has momentum {momentum}; its running statistics "
                    "do not follow the batches (allowed: 0 < momentum ≤ 1, or None)"
                )
            old = (1.0 - momentum) ** passes
            weights = torch.tensor([momentum * (1 - momentum) ** (passes - i) for i in range(1, passes + 1)])
            weights = weights / (1.0 - old)
        # in float64: with momentum None, 1 − old = k / (t + k) amplifies float32 rounding on a trained model
        mean, var = ((after[k].double() - old * before[k].double()) / (1.0 - old) for k in keys[:2])
        targets[name] = BatchNormTarget(
            mean.to(m.running_mean), var.clamp_min(0).to(m.running_var), True, weights.to(m.running_mean)
        )
    return targets


class BatchNormStatistics:
    """GradInversion's prior (Yin et al. 2021, Eq. 7): the distance of the dummy batch's per-channel mean
    and variance at every BatchNorm layer to the layer's target statistics,
    Σ_l ||μ_l(x) − μ_l||₂ + ||σ²_l(x) − σ²_l||₂. ``targets`` (layer name → :class:`BatchNormTarget`,
    default: the layers' running statistics now) come from :func:`batchnorm_targets`. Hooks are
    registered on the attack's own model copy."""

    def __init__(self, model: nn.Module, targets: dict[str, BatchNormTarget] | None = None) -> None:
        #: per layer, the (mean, variance) of each pass since the last :meth:`pop`
        self.passes: dict[nn.Module, list[tuple[torch.Tensor, torch.Tensor]]] = {}
        layers = _batchnorm_layers(model)
        if targets is None:
            targets = {n: _running(m) for n, m in layers.items()}
        self.targets = {layers[n]: t for n, t in targets.items() if n in layers}
        self.handles = [m.register_forward_hook(self._hook) for m in self.targets]

    def _hook(self, module: nn.Module, inputs: tuple[torch.Tensor, ...], _: torch.Tensor) -> None:
        target = self.targets[module]
        x = inputs[0]
        dims = [0, *range(2, x.ndim)]
        self.passes.setdefault(module, []).append(
            (x.mean(dim=dims), x.var(dim=dims, unbiased=target.unbiased))
        )

    @property
    def available(self) -> bool:
        return bool(self.handles)

    def pop(self) -> torch.Tensor:
        """The prior's value for the forward passes since the last call (0 without BatchNorm layers):
        per layer, the passes' weighted mean against the target when there are as many passes as the
        target has weights, else every pass against it."""
        terms = []
        for module, passes in self.passes.items():
            target = self.targets[module]
            if target.weights is not None and len(passes) == len(target.weights) > 1:
                w = target.weights.view(-1, 1)
                means, variances = (torch.stack([p[i] for p in passes]) for i in (0, 1))
                passes = [((means * w).sum(0), (variances * w).sum(0))]
            for mean, var in passes:
                terms.append(
                    torch.linalg.vector_norm(mean - target.mean) + torch.linalg.vector_norm(var - target.var)
                )
        self.passes = {}
        return sum(terms) if terms else torch.zeros(())  # type: ignore[return-value]

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
