"""Local SGD with momentum over minibatches: the one loop that both the client runs (in place, on its
own copy of the model) and an optimization attack unrolls (functionally, differentiably, to match a
FedAvg update; Geiping et al., Inverting Gradients, Sec. 5)."""

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
