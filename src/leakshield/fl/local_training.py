"""Local training over minibatches — SGD with momentum or Adam — as the one loop that both the client
runs (in place, on its own copy of the model) and an optimization attack unrolls (functionally,
differentiably, to match a FedAvg update; Geiping et al., Inverting Gradients, Sec. 5). Adam is
PyTorch's (Kingma & Ba, ICLR 2015, Algorithm 1, in ``torch.optim.Adam``'s arithmetic): PRECODE and
Anti-GAN train their clients with it."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

import torch

Step = TypeVar("Step")
Params = dict[str, torch.Tensor]


def minibatch_schedule(
    n: int,
    batch_size: int,
    epochs: int,
    *,
    shuffle: bool,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> Iterator[tuple[int, torch.Tensor]]:
    """(local step, sample indices) of every minibatch: ``epochs`` passes over ``n`` samples in batches
    of ``batch_size``. With ``shuffle`` each epoch's order is drawn from ``generator`` when the epoch
    starts (lazily, so draws interleave with the caller's as in a training loop); else in order."""
    batches = math.ceil(n / batch_size)
    for epoch in range(epochs):
        if shuffle:
            if generator is None:
                raise ValueError("a shuffled schedule needs a generator")
            order = torch.randperm(n, generator=generator, device=generator.device).to(device)
        else:
            order = torch.arange(n, device=device)
        for b in range(batches):
            yield epoch * batches + b, order[b * batch_size : (b + 1) * batch_size]


def local_sgd(
    params: Params,
    steps: Iterable[Step],
    gradient: Callable[[Params, Step], Params],
    *,
    lr: float,
    momentum: float,
    in_place: bool,
) -> Params:
    """Run SGD with heavy-ball momentum (v ← μ·v + g, θ ← θ − lr·v, PyTorch's convention) over
    ``steps``; ``gradient(current parameters, step)`` returns the minibatch gradient.

    ``in_place``: update the given tensors (a client's model parameters) without recording a graph;
    else build new tensors (differentiable w.r.t. whatever the gradients depend on, for an attack that
    unrolls the client). Returns the final parameters (the same tensors when ``in_place``)."""
    current = dict(params)
    velocity = {k: torch.zeros_like(v) for k, v in current.items()}
    for step in steps:
        grads = gradient(current, step)
        if in_place:
            with torch.no_grad():
                for k, p in current.items():
                    velocity[k].mul_(momentum).add_(grads[k])
                    p.sub_(lr * velocity[k])
        else:
            for k in list(current):
                velocity[k] = momentum * velocity[k] + grads[k]
                current[k] = current[k] - lr * velocity[k]
    return current


#: Adam's defaults (torch.optim.Adam)
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


def local_adam(
    params: Params,
    steps: Iterable[Step],
    gradient: Callable[[Params, Step], Params],
    *,
    lr: float,
    betas: tuple[float, float] = ADAM_BETAS,
    eps: float = ADAM_EPS,
    in_place: bool,
) -> Params:
    """Run Adam over ``steps`` from fresh moments: m ← β₁m + (1−β₁)g, v ← β₂v + (1−β₂)g²,
    θ ← θ − (lr / (1−β₁ᵗ)) · m / (√v / √(1−β₂ᵗ) + ε) — ``torch.optim.Adam``'s order of operations.
    ``in_place`` as in :func:`local_sgd`; the differentiable form keeps √v off zero's gradient."""
    current = dict(params)
    m = {k: torch.zeros_like(v) for k, v in current.items()}
    v2 = {k: torch.zeros_like(v) for k, v in current.items()}
    beta1, beta2 = betas
    for t, step in enumerate(steps, start=1):
        grads = gradient(current, step)
        correction1, correction2 = 1 - beta1**t, 1 - beta2**t
        step_size = lr / correction1
        if in_place:
            with torch.no_grad():
                for k, p in current.items():
                    m[k].lerp_(grads[k], 1 - beta1)
                    v2[k].mul_(beta2).addcmul_(grads[k], grads[k].conj(), value=1 - beta2)
                    denom = (v2[k].sqrt() / math.sqrt(correction2)).add_(eps)
                    p.addcdiv_(m[k], denom, value=-step_size)
        else:
            for k in list(current):
                m[k] = beta1 * m[k] + (1 - beta1) * grads[k]
                v2[k] = beta2 * v2[k] + (1 - beta2) * grads[k] * grads[k]
                denom = torch.sqrt(v2[k] + 1e-30) / math.sqrt(correction2) + eps
                current[k] = current[k] - step_size * m[k] / denom
    return current


def local_training(
    params: Params,
    steps: Iterable[Step],
    gradient: Callable[[Params, Step], Params],
    *,
    optimizer: str,
    lr: float,
    momentum: float,
    in_place: bool,
) -> Params:
    """The client's local optimizer by name: ``sgd`` (:func:`local_sgd`) or ``adam`` (:func:`local_adam`)."""
    if optimizer == "adam":
        return local_adam(params, steps, gradient, lr=lr, in_place=in_place)
    if optimizer != "sgd":
        raise ValueError(f"optimizer {optimizer!r}; allowed: sgd, adam")
    return local_sgd(params, steps, gradient, lr=lr, momentum=momentum, in_place=in_place)
