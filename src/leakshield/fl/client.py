"""A client's local computation: defense stages around FedSGD or FedAvg (DESIGN.md flow)."""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import nn

from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.defenses.base import DefensePipeline
from leakshield.fl.config import LocalTraining
from leakshield.fl.loss import parameter_gradients, training_loss
from leakshield.fl.types import ClientUpdate, ProtocolFacts, ServerView, ThreatModel, build_server_view

Normalize = Callable[[torch.Tensor], torch.Tensor]


def plain_gradient(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """∇θ of the batch's training loss (mean cross-entropy plus the model's auxiliary terms), for every
    parameter (zeros where unused)."""
    return parameter_gradients(model, training_loss(model, model(x), y))


@contextlib.contextmanager
def client_rng(generator: torch.Generator, step: int) -> Iterator[None]:
    """Seed torch's global RNG from the client's generator and the local step, and restore it after:
    stochastic layers (dropout, PRECODE's sampling) and DP noise draw from the global RNG, and must be
    reproducible per client, round and step without consuming draws of ``generator``."""
    devices = [generator.device] if generator.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed((generator.initial_seed() * 1_000_003 + step) % (2**63 - 1))
        yield


@dataclass(frozen=True)
class ClientTrace:
    """Private facts the evaluator keeps (never given to an attack): the defended inputs x' in [0, 1]
    pixel space, one per private sample and in its order, when the data stage preserves the batch."""

    defended_x: torch.Tensor | None


def compute_update(
    model: nn.Module,
    data: ImageSet,
    local: LocalTraining,
    defenses: DefensePipeline,
    *,
    normalize: Normalize,
    generator: torch.Generator,
    model_mode: str = "train",
    pool: ImageSet | None = None,
) -> tuple[ClientUpdate, ClientTrace]:
    """Compute a client's update on ``data`` under ``defenses``.

    FedSGD: the gradient of the whole of ``data`` as one batch (the caller picks the batch).
    FedAvg: ``local.local_epochs`` epochs of SGD with momentum over ``data`` in shuffled minibatches.
    ``model`` is not modified (parameters, buffers and train/eval mode are as before). Images in
    ``data`` are [0, 1] pixels; ``normalize`` maps them to model input. ``pool`` is the client's local
    dataset when ``data`` is only the batch it shares a gradient of (mixing defenses draw partners from
    it); it defaults to ``data``.
    """
    defenses.bind_local_data(pool if pool is not None else data)
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    gradient_fn = defenses.compute_gradient() or plain_gradient
    if local.algorithm == "fedsgd":
        was_training = model.training
        model.train(model_mode == "train")
        x, y = defenses.data_hook(data.x, data.y, generator)
        defenses.bind_batch(data)
        with client_rng(generator, 0):
            delta = gradient_fn(model, normalize(x), y)
        # a train-mode forward moves BatchNorm statistics: report them, then restore the global model
        buffers = {k: v.detach().clone() for k, v in model.named_buffers()} if model_mode == "train" else {}
        model.load_state_dict(start)
        model.train(was_training)
        steps, batch = 1, len(data)
        trace = ClientTrace(x.detach() if len(x) == len(data) else None)
    else:
        delta, steps, buffers, trace = _fedavg(
            model, data, local, defenses, gradient_fn, normalize, generator, model_mode
        )
        batch = local.batch_size
    delta = defenses.release_hook(delta, generator)
    facts = ProtocolFacts(
        algorithm=local.algorithm,
        local_lr=local.local_lr,
        momentum=local.momentum if local.algorithm == "fedavg" else 0.0,
        local_epochs=local.local_epochs if local.algorithm == "fedavg" else 1,
        local_steps=steps,
        batch_size=batch,
        num_samples=len(data),
        model_mode="train" if model_mode == "train" else "eval",
        shuffled=local.algorithm == "fedavg" and local.shuffle,
    )
    return ClientUpdate(global_params=start, delta=delta, protocol=facts, buffers=buffers), trace


def _fedavg(model, data, local, defenses, gradient_fn, normalize, generator, model_mode):
    worker = copy.deepcopy(model)
    worker.train(model_mode == "train")
    params = dict(worker.named_parameters())
    before = {k: p.detach().clone() for k, p in params.items()}
    velocity = {k: torch.zeros_like(p) for k, p in params.items()}
    n = len(data)
    batches = math.ceil(n / local.batch_size)
    defended = torch.empty_like(data.x)
    complete = True
    for epoch in range(local.local_epochs):
        if local.shuffle:
            order = torch.randperm(n, generator=generator, device=generator.device).to(data.x.device)
        else:
            order = torch.arange(n, device=data.x.device)
        for b in range(batches):
            idx = order[b * local.batch_size : (b + 1) * local.batch_size]
            x, y = defenses.data_hook(data.x[idx], data.y[idx], generator)
            defenses.bind_batch(data.subset(idx))
            if epoch == 0:
                if len(x) == len(idx):
                    defended[idx] = x.detach()
                else:
                    complete = False
            with client_rng(generator, epoch * batches + b):
                grads = gradient_fn(worker, normalize(x), y)
            with torch.no_grad():
                for k, p in params.items():
                    velocity[k].mul_(local.momentum).add_(grads[k])
                    p.sub_(local.local_lr * velocity[k])
    delta = {k: (params[k].detach() - before[k]) for k in params}
    buffers = {k: v.detach().clone() for k, v in worker.named_buffers()}
    trace = ClientTrace(defended if complete else None)
    return delta, local.local_epochs * batches, buffers, trace


def server_view_of(
    model: nn.Module,
    batch: ImageSet,
    info: DatasetInfo,
    *,
    local: LocalTraining | None = None,
    defenses: DefensePipeline | None = None,
    labels_known: bool = False,
    model_mode: str = "eval",
    seed: int = 0,
) -> ServerView:
    """What the server sees when one client computes its update on ``batch``: a shortcut for
    :func:`compute_update` followed by :func:`~leakshield.fl.types.build_server_view`."""
    pipeline = defenses or DefensePipeline()
    update, _ = compute_update(
        model,
        batch,
        local or LocalTraining(),
        pipeline,
        normalize=info.normalize,
        generator=torch.Generator().manual_seed(seed),
        model_mode=model_mode,
    )
    return build_server_view(
        model,
        update,
        info,
        ThreatModel(labels_known=labels_known),
        labels=batch.y,
        defenses=pipeline.public_config(),
    )
