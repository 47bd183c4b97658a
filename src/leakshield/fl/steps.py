"""leakshield's client-side defense stages for a training loop that is not leakshield's: a user's own
Flower train step, or any FL framework's. One :class:`DefenseSteps` per client and round gives the data
stage (MixUp, InstaHide, ATS, LODA's and Anti-GAN's training data), the gradient stage (DP-SGD,
Soteria, DCS²) and the release stage (noise, clipping, pruning, quantization) with the same context and
randomness as leakshield's :class:`~leakshield.fl.HonestClient`, so the same loop gives the same update.

The model stage (PRECODE, dropout, DP-SGD's GroupNorm) belongs to the model the server builds:
``pipeline.model_hook(model, seed)`` on both sides. Example, a FedSGD train step::

    steps = DefenseSteps.for_round(pipeline, client_id=pid, round=r, dataset=data, info=info, seed=seed)
    batch = steps.fedsgd_batch(batch_size)            # the minibatch leakshield's client would draw
    x, y = steps.batch(batch.x, batch.y)              # data stage, pixels in [0, 1]
    gradient = steps.gradient(model, x, y)            # gradient stage (normalizes x itself)
    gradient = steps.release(gradient)                # release stage: what leaves the client
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import nn

from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.defenses.base import ClientContext, DefensePipeline
from leakshield.fl.client import client_rng, release_generator, seeded_generator


@dataclass(frozen=True)
class DefenseSteps:
    """The defense ``pipeline``'s client stages for one client in one round (``context``)."""

    pipeline: DefensePipeline
    context: ClientContext

    @classmethod
    def for_round(
        cls,
        pipeline: DefensePipeline,
        *,
        client_id: int,
        round: int,
        dataset: ImageSet,
        info: DatasetInfo,
        seed: int,
        public: ImageSet | None = None,
        device: torch.device | str = "cpu",
    ) -> DefenseSteps:
        """The stages of client ``client_id`` (holding ``dataset``, pixels in [0, 1]) in ``round``, its
        randomness seeded by (``seed``, round, client id) as leakshield's client seeds it."""
        generator = seeded_generator(seed, round, client_id, device=device)
        return cls(pipeline, ClientContext(client_id, round, dataset, info, generator, public, seed=seed))

    def fedsgd_batch(self, batch_size: int) -> ImageSet:
        """The FedSGD minibatch leakshield's client draws (first use of the round's generator)."""
        data, generator = self.context.dataset, self.context.generator
        pick = torch.randperm(len(data), generator=generator, device=generator.device)
        return data.subset(pick[:batch_size].sort().values.cpu())

    def _at(self, x: torch.Tensor, y: torch.Tensor, step: int, batch: ImageSet | None) -> ClientContext:
        return self.context.at_step(batch if batch is not None else ImageSet(x, y), step)

    def batch(
        self, x: torch.Tensor, y: torch.Tensor, step: int = 0, batch: ImageSet | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The data stage on minibatch (``x``, ``y``) of local ``step`` (``batch``: the same samples
        with their per-sample flags, if any)."""
        return self.pipeline.data_hook(x, y, self._at(x, y, step, batch))

    def gradient(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, step: int = 0, batch: ImageSet | None = None
    ) -> dict[str, torch.Tensor]:
        """The minibatch gradient (the gradient stage's, else the plain one, then the step stage) of
        pixels ``x`` in [0, 1], stochastic layers and step-stage noise seeded per ``step`` as in
        leakshield's client: pass each local step's own number."""
        context = self._at(x, y, step, batch)
        with client_rng(self.context.generator, step):
            return self.pipeline.gradient(model, self.context.info.normalize(x), y, context)

    def release(self, update: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The release stage on the update (FedSGD: the gradient; FedAvg: Δθ), with its own stream."""
        context = dataclasses.replace(self.context, generator=release_generator(self.context.generator))
        return self.pipeline.release_hook(update, context)
