"""The BatchNorm-statistics prior of GradInversion / DeepInversion (Yin et al., CVPR 2021, Eq. 7) and the
statistics it pulls the dummy batch towards.

In eval mode a BatchNorm layer normalizes with its running statistics, which are then the data's best
summary the server holds. In train mode it normalizes with the *batch's own* statistics and moves its
running ones towards them, r ← (1 − m)·r + m·b; a client that runs in train mode reports its buffers
after training, so the server reads the batch statistics back from before and after: after k forward
passes over batches with statistics b (``num_batches_tracked`` counts them),
b = (r_after − (1 − m)^k·r_before) / (1 − (1 − m)^k) — exact for one pass (FedSGD), the passes' weighted
mean for several (FedAvg). Matching the running statistics instead, as an eval-mode prior does, pulls a
train-mode reconstruction towards the global model's statistics (at round 0 a mean of 0 and a variance of
1 at every layer), not the client's.
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
    are missing or a layer keeps a cumulative average (momentum None), whose batch statistics the
    buffers do not determine."""
    layers = _batchnorm_layers(model)
    if view.update.protocol.model_mode == "eval":
        return {
            name: BatchNormTarget(m.running_mean.detach().clone(), m.running_var.detach().clone(), False)
            for name, m in layers.items()
        }
    after, before = view.update.buffers, view.update.global_params
    targets = {}
    for name, m in layers.items():
        keys = [f"{name}.{b}" for b in ("running_mean", "running_var", "num_batches_tracked")]
        if any(k not in after or k not in before for k in keys):
            raise ValueError(
                f"{attack}: the client ran BatchNorm in train mode but its update carries "
                f"no statistics of layer {name!r} (buffers) to read its batch's from"
            )
        if m.momentum is None:
            raise ValueError(
                f"{attack}: BatchNorm layer {name!r} keeps a cumulative average (momentum "
                "None); its batch statistics cannot be read from the update"
            )
        passes = int(after[keys[2]]) - int(before[keys[2]])
        if passes < 1:
            raise ValueError(
                f"{attack}: BatchNorm layer {name!r} ran no train-mode pass "
                "(num_batches_tracked unchanged); its statistics are not the batch's"
            )
        keep = (1.0 - float(m.momentum)) ** passes
        mean, var = ((after[k].float() - keep * before[k].float()) / (1.0 - keep) for k in keys[:2])
        targets[name] = BatchNormTarget(mean.to(m.running_mean), var.clamp_min(0).to(m.running_var), True)
    return targets


class BatchNormStatistics:
    """GradInversion's prior (Yin et al. 2021, Eq. 7): the distance of the dummy batch's per-channel mean
    and variance at every BatchNorm layer to the layer's target statistics,
    Σ_l ||μ_l(x) − μ_l||₂ + ||σ²_l(x) − σ²_l||₂. ``targets`` (layer name → :class:`BatchNormTarget`,
    default: the layers' running statistics now) come from :func:`batchnorm_targets`. Hooks are
    registered on the attack's own model copy."""

    def __init__(self, model: nn.Module, targets: dict[str, BatchNormTarget] | None = None) -> None:
        self.terms: list[torch.Tensor] = []
        layers = _batchnorm_layers(model)
        if targets is None:
            targets = {
                n: BatchNormTarget(m.running_mean.detach().clone(), m.running_var.detach().clone(), False)
                for n, m in layers.items()
            }
        self.targets = {layers[n]: t for n, t in targets.items() if n in layers}
        self.handles = [m.register_forward_hook(self._hook) for m in self.targets]

    def _hook(self, module: nn.Module, inputs: tuple[torch.Tensor, ...], _: torch.Tensor) -> None:
        target = self.targets[module]
        x = inputs[0]
        dims = [0, *range(2, x.ndim)]
        mean = x.mean(dim=dims)
        var = x.var(dim=dims, unbiased=target.unbiased)
        self.terms.append(
            torch.linalg.vector_norm(mean - target.mean) + torch.linalg.vector_norm(var - target.var)
        )

    @property
    def available(self) -> bool:
        return bool(self.handles)

    def pop(self) -> torch.Tensor:
        """The prior's value for the last forward pass (0 without BatchNorm layers)."""
        value = sum(self.terms) if self.terms else torch.zeros(())
        self.terms = []
        return value  # type: ignore[return-value]

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
