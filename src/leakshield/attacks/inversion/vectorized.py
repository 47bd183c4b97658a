"""Many independent gradient-inversion attacks advanced together in one vectorized step.

For V victims attacked with the same configuration on the same model (one FedSGD round), the matching
objective of one victim is written with ``torch.func`` — the dummy gradient as ``grad`` of the task loss
w.r.t. the matched parameters, the image gradient as ``grad`` of the matching loss — and mapped over the
victims with ``vmap``. One call then returns every victim's image gradient; a single Adam/SGD optimizer on
the stacked images is exactly V independent optimizers (their updates are element-wise).

Optionally the vectorized step is compiled with ``torch.compile``; a compiled step is checked against the
eager one on the first call and dropped (with a warning) if compilation fails or disagrees.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from leakshield.attacks.inversion.objectives import DISTANCES, image_norm, task_loss, total_variation

StepFn = Callable[..., tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]]


class VectorizedObjective:
    """The matching objective of one victim as a pure function, and its vmapped image gradient.

    ``step(X, Y, *targets)`` takes the stacked dummy images X (V × B × C × H × W), labels Y (V × B) and one
    stacked target per matched parameter (V × …), and returns (∂loss/∂X, (loss, gradient distance)), each
    with a leading victim dimension.
    """

    def __init__(
        self,
        model: nn.Module,
        names: Sequence[str],
        *,
        distance: str,
        weights: Sequence[float],
        tv: float = 0.0,
        norm: float = 0.0,
        task: float = 0.0,
        match_released: bool = False,
        logit_gradient: bool = False,
    ) -> None:
        self.model = model
        self.names = list(names)
        params = {k: v.detach() for k, v in model.named_parameters()}
        self.matched = {k: params[k] for k in self.names}
        self.fixed = {k: v for k, v in params.items() if k not in self.matched}
        self.fixed.update({k: v.detach() for k, v in model.named_buffers()})
        self.distance = DISTANCES[distance]
        self.weights = list(weights)
        self.tv, self.norm, self.task = tv, norm, task
        self.match_released = match_released
        self.logit_gradient = logit_gradient
        self.eager: StepFn = vmap(grad(self.objective, has_aux=True))
        self.step: StepFn = self.eager

    def task_loss(self, matched: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = functional_call(self.model, {**self.fixed, **matched}, (x,))
        return task_loss(self.model, logits, y, self.logit_gradient)

    def objective(
        self, x: torch.Tensor, y: torch.Tensor, *targets: torch.Tensor
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        dummy = grad(self.task_loss)(self.matched, x, y)
        matched = [dummy[k] for k in self.names]
        if self.match_released:  # only the entries the client released (against pruning)
            matched = [d * (t != 0) for d, t in zip(matched, targets, strict=True)]
        grad_distance = self.distance(matched, list(targets), self.weights)
        loss = grad_distance
        if self.tv:
            loss = loss + self.tv * total_variation(x)
        if self.norm:
            loss = loss + self.norm * image_norm(x)
        if self.task:
            loss = loss + self.task * self.task_loss(self.matched, x, y)
        return loss, (loss.detach(), grad_distance.detach())

    def compile(self, x: torch.Tensor, y: torch.Tensor, targets: Sequence[torch.Tensor]) -> bool:
        """Compile the vectorized step; keep it only if it runs and matches eager on (x, y, targets)."""
        try:
            compiled = torch.compile(self.eager, dynamic=False)
            got = compiled(x, y, *targets)[0]
            want = self.eager(x, y, *targets)[0]
        except Exception as exc:  # compilation support varies by platform and version
            warnings.warn(f"torch.compile of the attack step failed, running eager: {exc}", stacklevel=2)
            return False
        scale = want.abs().max().clamp_min(1e-12)
        if not torch.allclose(got, want, atol=1e-4 * float(scale), rtol=1e-4):
            warnings.warn("the compiled attack step disagrees with eager; running eager", stacklevel=2)
            return False
        self.step = compiled
        return True
