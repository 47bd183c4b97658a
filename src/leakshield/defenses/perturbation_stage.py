"""Where a perturbing baseline acts: on the released update once per round (``stage: release``, the
default) or on every local minibatch gradient before the optimizer's step (``stage: step``), as PRECODE's
baselines are described: noise and compression applied "in each optimization step" (Scheliga et al.,
WACV 2022, Sec. 5). Under FedSGD a round is one step whose gradient is the update: both stages perturb
the same values. Under FedAvg the step stage perturbs every one of the round's steps, and the local
optimizer (SGD's learning rate and momentum, or Adam's moments) carries the perturbed gradients into
the update; the release stage perturbs the round's update. The adaptive attacks (``noise-aware``,
``pruning-aware``, GGL's masking) model the release stage: against a FedAvg update they do not match a
step-stage perturbation (under FedSGD the two coincide)."""

from __future__ import annotations

from typing import Literal

import torch

from leakshield.defenses.base import ClientContext, Defense
from leakshield.registry import Params


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
        return self.perturb(gradient, context) if self.params.stage == "step" else gradient
