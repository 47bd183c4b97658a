"""The attacker's replay of the client's protocol on dummy data: the update a dummy batch would produce,
differentiable w.r.t. the dummy images (FedSGD: the gradient, averaged over draws of stochastic layers;
FedAvg: the client's local SGD or Adam — as its protocol facts say — unrolled with the same loop the
client runs, Inverting Gradients Sec. 5)."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.func import functional_call

from leakshield.attacks.passive.inversion.objectives import task_loss
from leakshield.fl.local_training import local_training, minibatch_schedule
from leakshield.fl.types import ServerView
from leakshield.loss import training_loss


def dummy_update(
    model: nn.Module,
    names: list[str],
    x: torch.Tensor,
    labels: torch.Tensor,
    view: ServerView,
    samples: int = 1,
    *,
    logit_gradient: bool = False,
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The update the dummy batch ``x`` (normalized) with ``labels`` would produce, for the parameters
    ``names``, and its first task loss. FedSGD: with ``samples`` > 1 the mean over that many draws of
    the stochastic layers; ``logit_gradient``: ``labels`` is ∂L/∂z (labels 'bias') and the gradient is
    the vector–Jacobian product ∂z/∂θᵀ·∂L/∂z. FedAvg: the client's known local SGD (lr, momentum,
    epochs, minibatch size) unrolled over ``x`` in order, the update being θ_after − θ_before. When
    ``x`` holds one copy of the batch per local epoch (E·N images for the N ``labels``), epoch e steps
    through copy e (the FedAvg attack of Dimitrov et al., TMLR 2022, Sec. 4)."""
    facts = view.update.protocol
    params = dict(model.named_parameters())
    if facts.algorithm == "fedsgd":
        total: list[torch.Tensor] | None = None
        for _ in range(samples):
            loss = task_loss(model, model(x), labels, logit_gradient)
            grads = torch.autograd.grad(loss, [params[k] for k in names], create_graph=True)
            total = list(grads) if total is None else [t + g for t, g in zip(total, grads, strict=True)]
        assert total is not None
        return (total if samples == 1 else [t / samples for t in total]), loss
    n = len(labels)
    copies = facts.local_epochs if len(x) != n else 1
    if len(x) != n * copies:
        raise ValueError(f"{len(x)} dummies for {n} labels: one copy of the batch, or one per each of the "
                         f"{facts.local_epochs} local epochs")  # fmt: skip
    if copies > 1:
        labels = labels.repeat(copies, *[1] * (labels.ndim - 1))
    buffers = dict(model.named_buffers())
    first_loss: list[torch.Tensor] = []

    def gradient(
        current: dict[str, torch.Tensor], scheduled: tuple[int, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        _, idx = scheduled
        logits = functional_call(model, {**current, **buffers}, (x[idx],))
        loss = training_loss(model, logits, labels[idx])
        if not first_loss:
            first_loss.append(loss)
        grads = torch.autograd.grad(loss, list(current.values()), create_graph=True)
        return dict(zip(current, grads, strict=True))

    schedule = minibatch_schedule(n, facts.batch_size, facts.local_epochs, shuffle=False, device=x.device)
    if copies > 1:
        batches = math.ceil(n / facts.batch_size)
        schedule = ((step, idx + (step // batches) * n) for step, idx in schedule)
    final = local_training(params, schedule, gradient, optimizer=facts.optimizer, lr=facts.local_lr,
                           momentum=facts.momentum, in_place=False)  # fmt: skip
    return [final[k] - params[k] for k in names], first_loss[0]
