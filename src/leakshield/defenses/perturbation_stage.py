"""Where a perturbing baseline acts: on the released update once per round (``stage: release``, the
default) or on every local minibatch gradient before the optimizer's step (``stage: step``), as PRECODE's
baselines are described: noise and compression applied "in each optimization step" (Scheliga et al.,
WACV 2022, Sec. 5). Under FedSGD a round is one step whose gradient is the update: both stages perturb
the same values. Under FedAvg the step stage perturbs every one of the round's steps, each scaled by
the learning rate and carried by the optimizer's momentum, and the release stage the round's sum."""

from __future__ import annotations

import dataclasses
from typing import Literal

import torch

from leakshield.defenses.base import ClientContext, Defense
from leakshield.registry import Params
from leakshield.seeds import seeded_generator

#: the stream of a step-stage perturbation's randomness (apart from the release stage's)
STEP_STREAM = 0x57E95


class StageParams(Params):
    """stage: ``release`` (the update, once per round; the leaderboard's default) or ``step`` (every
    local minibatch gradient, before the optimizer)."""

    stage: Literal["release", "step"] = "release"


class StagedPerturbation(Defense):
    """A perturbation of a parameter dict applied at the stage its ``stage`` parameter names."""

    params: StageParams

    def perturb(self, values: dict[str, torch.Tensor], context: ClientContext) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def release_hook(
        self, update: dict[str, torch.Tensor], context: ClientContext
    ) -> dict[str, torch.Tensor]:
        return self.perturb(update, context) if self.params.stage == "release" else update

    def step_hook(self, gradient: dict[str, torch.Tensor], context: ClientContext) -> dict[str, torch.Tensor]:
        if self.params.stage != "step":
            return gradient
        return self.perturb(gradient, step_context(context))


def step_context(context: ClientContext) -> ClientContext:
    """``context`` with a generator of the step's own: seeded by the client's round generator and the
    local step, so the perturbation does not consume the draws of the data and gradient stages."""
    gen = context.generator
    return dataclasses.replace(
        context, generator=seeded_generator(gen.initial_seed(), STEP_STREAM, context.step, device=gen.device)
    )
