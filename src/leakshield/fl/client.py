"""The honest client: defense stages around FedSGD or FedAvg on its own copy of the model the server
sent (a participant sees only its own data and its own copy)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

from leakshield.artifacts import ArtifactCache
from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.defenses.base import ACCEPTED, ClientContext, DefensePipeline, Verdict
from leakshield.fl.config import LocalTraining
from leakshield.fl.local_training import local_training, minibatch_schedule
from leakshield.fl.types import ClientUpdate, ProtocolFacts
from leakshield.seeds import seeded_generator

#: the key of the release stage's own random stream (see :func:`release_generator`)
RELEASE_STREAM = 0x5E1EA5E


def release_generator(generator: torch.Generator) -> torch.Generator:
    """The release stage's randomness (noise on the update): a stream of its own, derived from the
    client's round generator, so the noise a client adds does not depend on how many draws its data
    and gradient stages consumed, and a defense applied outside the train step (a Flower mod) draws
    exactly what the in-process client draws."""
    return seeded_generator(generator.initial_seed(), RELEASE_STREAM, device=generator.device)


@contextlib.contextmanager
def client_rng(generator: torch.Generator, step: int) -> Iterator[None]:
    """Seed torch's global RNG from the client's generator and the local step, and restore it after:
    stochastic layers (dropout, PRECODE's sampling) and DP noise draw from the global RNG, and must be
    reproducible per client, round and step without consuming draws of ``generator``."""
    devices = [generator.device] if generator.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed((generator.initial_seed() * 1_000_003 + step) % (2**63 - 1))
        yield


def private_copy(model: nn.Module) -> nn.Module:
    """The client's own copy of the model it received: whatever it computes (activations, BatchNorm
    statistics, a layer's cached values) stays in this copy, out of the server's reach."""
    return copy.deepcopy(model)


@dataclass(frozen=True)
class ClientTrace:
    """Private facts the evaluator keeps (never given to an attack): the defended inputs x' in [0, 1]
    pixel space, one per private sample and in its order, when the data stage preserves the batch; and,
    for a mixing defense, each sample's mixing component of largest weight (``component_x``)."""

    defended_x: torch.Tensor | None
    component_x: torch.Tensor | None = None


@dataclass
class HonestClient:
    """A participant that follows the protocol: ``local`` training on its ``dataset`` through the
    defense ``pipeline``. ``info`` and ``public`` are the dataset's public facts and public split;
    ``seed`` with the round and ``client_id`` seeds its randomness; ``model_mode`` is how it runs the
    model (``train``: BatchNorm statistics move and are reported; ``eval``). ``accounted``: whether its
    local steps count for privacy accounting (it runs the defenses' client stages)."""

    client_id: int
    dataset: ImageSet
    local: LocalTraining
    pipeline: DefensePipeline
    info: DatasetInfo
    public: ImageSet | None = None
    seed: int = 0
    model_mode: str = "train"
    accounted: bool = True
    #: the run's artifact cache (handed to the defenses' stages)
    cache: ArtifactCache | None = field(default=None, compare=False, repr=False)
    #: (round, reason) of every model this client's guards refused (observable refusals)
    refusals: list[tuple[int, str]] = field(default_factory=list, compare=False, repr=False)
    #: the last model it accepted, kept only when a guard compares rounds (``drift-guard``)
    last_accepted: nn.Module | None = field(default=None, compare=False, repr=False)

    @property
    def sampling_rate(self) -> float:
        """The minibatch sampling rate q = B / |dataset| (DP accounting)."""
        return min(1.0, self.local.batch_size / max(len(self.dataset), 1))

    def generator(self, round: int, device: torch.device | str = "cpu") -> torch.Generator:
        return seeded_generator(self.seed, round, self.client_id, device=device)

    def fit(self, model: nn.Module, round: int) -> ClientUpdate | None:
        """The client's reply to ``model`` in ``round`` (None when it holds no data): FedSGD shares the
        gradient of one minibatch it draws, FedAvg trains on its whole dataset."""
        if len(self.dataset) == 0:
            return None
        device = next(model.parameters()).device
        generator = self.generator(round, device)
        verdict = self.inspect(model, round, generator, previous=self.last_accepted)
        if not verdict.accepted:
            self.refusals.append((round, verdict.reason))
            return None
        if self.pipeline.needs_previous:  # a guard compares the next round's model with this one
            self.last_accepted = copy.deepcopy(model)
        data, indices = self._round_data(generator)
        update, _ = self.compute(model, round, data, generator, indices=indices)
        return update

    def inspect(
        self, model: nn.Module, round: int, generator: torch.Generator, previous: nn.Module | None = None
    ) -> Verdict:
        """The guard stage: the pipeline's guards judge ``model`` as received, before any training
        (``previous``: the model the client accepted the round before, for guards that compare)."""
        if not self.pipeline.guards:
            return ACCEPTED
        context = dataclasses.replace(self.context(round, generator), previous=previous)
        return self.pipeline.inspect(model, context)

    def context(self, round: int, generator: torch.Generator) -> ClientContext:
        """The client's context in ``round`` (outside a minibatch)."""
        return ClientContext(
            client_id=self.client_id,
            round=round,
            dataset=self.dataset,
            info=self.info,
            generator=generator,
            public=self.public,
            seed=self.seed,
            cache=self.cache,
        )

    def round_data(self, round: int, device: torch.device | str = "cpu") -> ImageSet:
        """The samples the client computes its update on in ``round`` (FedSGD: the minibatch it draws;
        FedAvg: its whole dataset): what an auditor in a simulation rebuilds as ground truth. ``device``
        is where the client's model lives (its generator draws there; CPU and CUDA streams differ)."""
        return self._round_data(self.generator(round, device))[0]

    def _round_data(self, generator: torch.Generator) -> tuple[ImageSet, torch.Tensor]:
        """The round's samples and their rows in the client's dataset."""
        data = self.dataset
        if self.local.algorithm == "fedsgd":
            pick = torch.randperm(len(data), generator=generator, device=generator.device)
            rows = pick[: self.local.batch_size].sort().values.cpu()
            return data.subset(rows), rows
        return data, torch.arange(len(data))

    def compute(
        self,
        model: nn.Module,
        round: int,
        data: ImageSet,
        generator: torch.Generator,
        *,
        indices: torch.Tensor | None = None,
    ) -> tuple[ClientUpdate, ClientTrace]:
        """The update on ``data`` (FedSGD: one gradient of it as one batch; FedAvg: ``local_epochs``
        epochs of SGD with momentum over it in minibatches), computed on a private copy of ``model``,
        and the client's trace. ``indices``: the rows of ``data`` in the client's dataset, when it came
        from it (data-stage defenses find their precomputed images by them). ``model`` is untouched."""
        start = {k: v.detach().clone() for k, v in model.state_dict().items()}
        worker = private_copy(model)
        worker.train(self.model_mode == "train")
        context = self.context(round, generator)
        local = self.local
        if local.algorithm == "fedsgd":
            step_context = context.at_step(data, 0, indices)
            x, y = self.pipeline.data_hook(data.x, data.y, step_context)
            with client_rng(generator, 0):
                delta = self.pipeline.gradient(worker, self.info.normalize(x), y, step_context)
            steps, batch = 1, len(data)
            component = step_context.notes.get("largest_component")
            trace = ClientTrace(
                x.detach() if len(x) == len(data) else None,
                component.detach() if component is not None and len(component) == len(data) else None,
            )
        else:
            delta, steps, trace = self._train(worker, data, context, indices)
            batch = local.batch_size
        buffers = {}
        if self.model_mode == "train" or local.algorithm == "fedavg":
            buffers = {k: v.detach().clone() for k, v in worker.named_buffers()}
        delta = self.pipeline.release_hook(
            delta, dataclasses.replace(context, generator=release_generator(generator))
        )
        facts = ProtocolFacts(
            algorithm=local.algorithm,
            local_lr=local.local_lr,
            momentum=local.momentum if local.algorithm == "fedavg" else 0.0,
            local_epochs=local.local_epochs if local.algorithm == "fedavg" else 1,
            local_steps=steps,
            batch_size=batch,
            num_samples=len(data),
            model_mode="train" if self.model_mode == "train" else "eval",
            shuffled=local.algorithm == "fedavg" and local.shuffle,
            optimizer=local.optimizer,
        )
        return ClientUpdate(global_params=start, delta=delta, protocol=facts, buffers=buffers), trace

    def _train(
        self, worker: nn.Module, data: ImageSet, context: ClientContext, rows: torch.Tensor | None
    ) -> tuple[dict[str, torch.Tensor], int, ClientTrace]:
        local, generator = self.local, context.generator
        params = dict(worker.named_parameters())
        before = {k: p.detach().clone() for k, p in params.items()}
        defended = torch.empty_like(data.x)
        components: torch.Tensor | None = None
        complete = True
        schedule = minibatch_schedule(
            len(data),
            local.batch_size,
            local.local_epochs,
            shuffle=local.shuffle,
            generator=generator,
            device=data.x.device,
        )
        batches = -(-len(data) // local.batch_size)
        steps = 0

        def gradient(
            _: dict[str, torch.Tensor], scheduled: tuple[int, torch.Tensor]
        ) -> dict[str, torch.Tensor]:
            nonlocal complete, steps, components
            step, idx = scheduled
            batch = data.subset(idx)
            step_context = context.at_step(batch, step, None if rows is None else rows[idx.cpu()])
            x, y = self.pipeline.data_hook(batch.x, batch.y, step_context)
            if step < batches:  # the first epoch: the defended inputs the evaluator compares with
                if len(x) == len(idx):
                    defended[idx] = x.detach()
                else:
                    complete = False
                largest = step_context.notes.pop("largest_component", None)
                if largest is not None and len(largest) == len(idx):
                    components = torch.empty_like(data.x) if components is None else components
                    components[idx] = largest.detach()
            steps += 1
            with client_rng(generator, step):
                return self.pipeline.gradient(worker, self.info.normalize(x), y, step_context)

        local_training(params, schedule, gradient, optimizer=local.optimizer, lr=local.local_lr,
                       momentum=local.momentum, in_place=True)  # fmt: skip
        delta = {k: (params[k].detach() - before[k]) for k in params}
        trace = ClientTrace(defended, components) if complete else ClientTrace(None)
        return delta, steps, trace


def compute_update(
    model: nn.Module,
    data: ImageSet,
    local: LocalTraining,
    pipeline: DefensePipeline,
    *,
    info: DatasetInfo,
    generator: torch.Generator,
    public: ImageSet | None = None,
    pool: ImageSet | None = None,
    model_mode: str = "train",
    client_id: int = 0,
    round: int = 0,
) -> tuple[ClientUpdate, ClientTrace]:
    """One honest client's update on ``data`` under ``pipeline`` (see :meth:`HonestClient.compute`).

    ``pool`` is the client's whole dataset when ``data`` is only the batch it shares a gradient of
    (mixing defenses draw partners from it, sensitivity rules rank it); it defaults to ``data``.
    Images are [0, 1] pixels; ``info.normalize`` maps them to model input."""
    client = HonestClient(
        client_id=client_id,
        dataset=pool if pool is not None else data,
        local=local,
        pipeline=pipeline,
        info=info,
        public=public,
        model_mode=model_mode,
    )
    return client.compute(model, round, data, generator)
