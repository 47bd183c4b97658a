"""Many independent gradient-inversion attacks advanced together in one vectorized step.

For V victims attacked with the same configuration on the same model (one FedSGD round), the matching
objective of one victim is written with ``torch.func`` — the dummy gradient as ``grad`` of the task loss
w.r.t. the matched parameters, the image gradient as ``grad`` of the matching loss — and mapped over the
victims with ``vmap``. One call then returns every victim's image gradient; a single Adam/SGD optimizer on
the stacked images is exactly V independent optimizers (their updates are element-wise).

BatchNorm in eval mode is an affine map per channel; PyTorch has no vmap batching rule for its kernel
(``_native_batch_norm_legit_no_training``) and falls back to a Python loop over the victims, which
erased the gain on BatchNorm models (ConvNet, ResNet) and broke ``torch.compile``. The objective
therefore runs a copy of the model whose eval-mode BatchNorm layers compute that affine map from the
same parameters and running statistics (:func:`fold_batch_norm`): the same function, batched.

Optionally the vectorized step is compiled with ``torch.compile`` (on a CUDA device replayed as a CUDA
graph: :func:`replayed`); a compiled step is checked against the eager one before it is used and dropped
(with a warning) if compilation fails or disagrees.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from leakshield.attacks.passive.inversion.objectives import DISTANCES, image_norm, task_loss, total_variation

StepFn = Callable[..., tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]]


class EvalBatchNorm(nn.Module):
    """An eval-mode BatchNorm as its affine map, (x − μ)·γ/√(σ² + ε) + β, under the same parameter and
    buffer names (so ``functional_call`` state dicts still fit) and batchable by ``vmap``."""

    def __init__(self, bn: nn.modules.batchnorm._BatchNorm) -> None:
        super().__init__()
        self.weight, self.bias = bn.weight, bn.bias
        self.register_buffer("running_mean", bn.running_mean)
        self.register_buffer("running_var", bn.running_var)
        self.register_buffer("num_batches_tracked", bn.num_batches_tracked)
        self.eps = bn.eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = (1, -1) + (1,) * (x.ndim - 2)
        scale = torch.rsqrt(self.running_var + self.eps)
        if self.weight is not None:
            scale = scale * self.weight
        out = (x - self.running_mean.view(shape)) * scale.view(shape)
        return out + self.bias.view(shape) if self.bias is not None else out


def fold_batch_norm(model: nn.Module) -> nn.Module:
    """``model`` itself when it has no eval-mode BatchNorm with running statistics, else a copy whose such
    layers are :class:`EvalBatchNorm` (same names, same tensors)."""

    def foldable(m: nn.Module) -> bool:
        return (
            isinstance(m, nn.modules.batchnorm._BatchNorm) and not m.training and m.running_mean is not None
        )

    if not any(foldable(m) for m in model.modules()):
        return model
    folded = copy.deepcopy(model)
    for module in list(folded.modules()):
        for name, child in list(module.named_children()):
            if foldable(child):
                setattr(module, name, EvalBatchNorm(child))  # type: ignore[arg-type]
    return folded


class VectorizedObjective:
    """The matching objective of one victim as a pure function, and its vmapped image gradient.

    ``step(X, Y, *targets)`` takes the stacked dummy images X (V × B × C × H × W), labels Y (V × B) and one
    stacked target per matched parameter (V × …), and returns (∂loss/∂X, (loss, gradient distance)), each
    with a leading victim dimension. With ``joint_labels`` Y holds label logits (V × B × classes),
    optimized with the images (DLG), and the first output is the pair (∂loss/∂X, ∂loss/∂Y).
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
        joint_labels: bool = False,
    ) -> None:
        self.model = fold_batch_norm(model)
        self.names = list(names)
        params = {k: v.detach() for k, v in self.model.named_parameters()}
        self.matched = {k: params[k] for k in self.names}
        self.fixed = {k: v for k, v in params.items() if k not in self.matched}
        self.fixed.update({k: v.detach() for k, v in self.model.named_buffers()})
        self.distance = DISTANCES[distance]
        self.weights = list(weights)
        self.tv, self.norm, self.task = tv, norm, task
        self.match_released = match_released
        self.logit_gradient = logit_gradient
        self.joint_labels = joint_labels
        argnums = (0, 1) if joint_labels else 0
        self.eager: StepFn = vmap(grad(self.objective, argnums=argnums, has_aux=True))
        self.step: StepFn = self.eager

    def task_loss(self, matched: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = functional_call(self.model, {**self.fixed, **matched}, (x,))
        return task_loss(self.model, logits, y, self.logit_gradient)

    def objective(
        self, x: torch.Tensor, y: torch.Tensor, *targets: torch.Tensor
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        if self.joint_labels:
            y = F.softmax(y, dim=-1)
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

    def compile(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        targets: Sequence[torch.Tensor],
        cuda_graphs: bool = False,
        other_x: torch.Tensor | None = None,
    ) -> bool:
        """Compile the vectorized step; keep it only if it runs and matches eager on (x, y, targets).
        ``cuda_graphs``: on a CUDA device, replay the compiled kernels as one CUDA graph (torch.compile's
        ``reduce-overhead`` mode), the step's outputs copied out of the graph's memory; the graph is
        recorded on the second call and replayed from the third, so the check makes three, the last on
        ``other_x`` (another input of x's shape) when given, and compares every gradient."""
        graphs = cuda_graphs and x.is_cuda
        check_x = x if other_x is None else other_x
        try:
            compiled = torch.compile(self.eager, dynamic=False, mode="reduce-overhead" if graphs else None)
            compiled = replayed(compiled) if graphs else compiled
            for _ in range(2 if graphs else 0):  # the warm-up call and the recording
                compiled(x, y, *targets)
            got = _flat(compiled(check_x, y, *targets)[0])
            want = _flat(self.eager(check_x, y, *targets)[0])
        except Exception as exc:  # compilation support varies by platform and version
            warnings.warn(f"torch.compile of the attack step failed, running eager: {exc}", stacklevel=2)
            return False
        # relative to the gradient's norm: compiled convolutions round differently from eager ones, and
        # double backward through them differed by 3.2e-4 of the gradient's norm on ConvNet-32
        error = float((got - want).norm() / want.norm().clamp_min(1e-12))
        if not error < 1e-3 or not torch.isfinite(got).all():
            warnings.warn("the compiled attack step disagrees with eager; running eager", stacklevel=2)
            return False
        self.step = compiled
        return True


def replayed(step: StepFn) -> StepFn:
    """A CUDA-graph step whose outputs outlive its next call: a graph's outputs live in its memory pool
    and its next replay overwrites them, so each call starts a new step and returns copies."""

    def copied(*args: torch.Tensor) -> tuple[Any, tuple[torch.Tensor, torch.Tensor]]:
        torch.compiler.cudagraph_mark_step_begin()
        grads, (loss, score) = step(*args)
        grads = tuple(g.clone() for g in grads) if isinstance(grads, tuple) else grads.clone()
        return grads, (loss.clone(), score.clone())

    return copied


def _flat(gradient: torch.Tensor | tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Every gradient of a step (the image's, and the label logits' with joint labels) in one vector."""
    parts = gradient if isinstance(gradient, tuple) else (gradient,)
    return torch.cat([g.flatten() for g in parts])
