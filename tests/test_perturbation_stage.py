"""The perturbing baselines act where their ``stage`` says: on the released update once per round, or
on every local minibatch gradient before the optimizer (PRECODE's "in each optimization step")."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from leakshield.data import load_dataset
from leakshield.defenses import create_defense
from leakshield.defenses.base import DefensePipeline
from leakshield.fl.client import compute_update
from leakshield.fl.config import LocalTraining
from leakshield.flower.mods import is_release_only
from leakshield.models import create_model

LR, STEPS, SIGMA = 0.1, 8, 1e-3


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", {"size": 16})


def _update(digits, entries, algorithm: str = "fedavg") -> dict[str, torch.Tensor]:
    data = digits.train.subset(list(range(STEPS * 4)))
    model = create_model("lenet", {"activation": "tanh", "init_range": None}, in_shape=digits.info.shape,
                         num_classes=10, seed=0)  # fmt: skip
    local = LocalTraining(algorithm=algorithm, local_lr=LR, batch_size=4, shuffle=False)
    update, _ = compute_update(model, data, local, DefensePipeline.from_config(entries), info=digits.info,
                               generator=torch.Generator().manual_seed(0))  # fmt: skip
    return update.delta


def _deviation_std(update: dict[str, torch.Tensor], clean: dict[str, torch.Tensor]) -> float:
    return float(torch.cat([(update[k] - clean[k]).flatten() for k in clean]).std())


def test_release_noise_perturbs_the_update_once_and_step_noise_every_step(digits) -> None:
    """FedAvg, 8 steps of lr 0.1, no momentum: noise σ on the update deviates it by σ; on every step's
    gradient by lr·σ·√8 = 0.28σ (the steps' noises add; the noise's effect on later gradients is
    negligible at σ 1e-3)."""
    clean = _update(digits, [{"name": "none", "params": {}}])
    release = _update(digits, [{"name": "gaussian-noise", "params": {"sigma": SIGMA}}])
    step = _update(digits, [{"name": "gaussian-noise", "params": {"sigma": SIGMA, "stage": "step"}}])
    assert _deviation_std(release, clean) == pytest.approx(SIGMA, rel=0.05)
    assert _deviation_std(step, clean) == pytest.approx(LR * SIGMA * STEPS**0.5, rel=0.1)


def test_under_fedsgd_both_stages_perturb_the_one_gradient(digits) -> None:
    clean = _update(digits, [{"name": "none", "params": {}}], "fedsgd")
    for stage in ("release", "step"):
        noisy = _update(
            digits, [{"name": "gaussian-noise", "params": {"sigma": SIGMA, "stage": stage}}], "fedsgd"
        )
        assert _deviation_std(noisy, clean) == pytest.approx(SIGMA, rel=0.05)


def test_step_pruning_prunes_each_gradient_and_release_pruning_the_sum(digits) -> None:
    """At release the update keeps exactly ⌈10 %⌉ of every tensor; pruned at each of 8 steps, the kept
    entries differ from step to step and the first convolution's sum keeps more."""
    release = _update(digits, [{"name": "pruning", "params": {"ratio": 0.9}}])
    for v in release.values():
        assert int((v != 0).sum()) <= math.ceil(0.1 * v.numel())
    step = _update(digits, [{"name": "pruning", "params": {"ratio": 0.9, "stage": "step"}}])
    assert float((step["features.0.weight"] != 0).float().mean()) > 0.15
    sgd = _update(digits, [{"name": "pruning", "params": {"ratio": 0.9, "stage": "step"}}], "fedsgd")
    assert all(float((v != 0).float().mean()) <= 0.1 + 1 / v.numel() for v in sgd.values())


def test_stacked_step_noises_are_independent(digits) -> None:
    """Two step-stage noises draw in turn from the step's stream: √2·σ, not 2σ."""
    clean = _update(digits, [{"name": "none", "params": {}}], "fedsgd")
    noise = {"name": "gaussian-noise", "params": {"sigma": SIGMA, "stage": "step"}}
    assert _deviation_std(_update(digits, [noise, noise], "fedsgd"), clean) == pytest.approx(
        SIGMA * 2**0.5, rel=0.05
    )


def test_step_clipping_bounds_every_gradient_not_the_update(digits) -> None:
    """Each step's gradient clipped to norm 0.01: the update (8 steps of lr 0.1) is at most 8 · 0.1 ·
    0.01 in norm (the clean update is far larger); clipped at release it is exactly 0.01."""
    norm = lambda u: float(torch.sqrt(sum(v.pow(2).sum() for v in u.values())))  # noqa: E731
    step = _update(digits, [{"name": "clipping", "params": {"bound": 0.01, "stage": "step"}}])
    release = _update(digits, [{"name": "clipping", "params": {"bound": 0.01}}])
    assert norm(release) == pytest.approx(0.01, rel=1e-4)
    assert (
        norm(step) <= STEPS * LR * 0.01 * (1 + 1e-4) < norm(_update(digits, [{"name": "none", "params": {}}]))
    )


def test_a_step_stage_defense_is_not_a_release_mod() -> None:
    assert is_release_only(create_defense("gaussian-noise", {"sigma": 0.1}))
    assert not is_release_only(create_defense("gaussian-noise", {"sigma": 0.1, "stage": "step"}))


def test_the_step_noise_does_not_depend_on_the_draws_other_stages_took() -> None:
    """The step stage's stream is a function of the client's round seed and the step only: a data
    stage that consumed draws of the round generator leaves the step noise unchanged."""
    from helpers import client_context

    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(1, 10))
    x, y = torch.rand(2, 1, 1, 1), torch.tensor([1, 2])
    pipeline = DefensePipeline.from_config(
        [{"name": "gaussian-noise", "params": {"sigma": 1.0, "stage": "step"}}]
    )
    fresh = client_context(seed=3)
    used = client_context(seed=3)
    torch.rand(7, generator=used.generator)  # draws a data stage took
    first, second = (pipeline.gradient(model, x, y, c) for c in (fresh, used))
    assert all(torch.equal(first[k], second[k]) for k in first)
    later = pipeline.gradient(model, x, y, dataclasses.replace(fresh, step=1))
    assert not torch.equal(first["1.weight"], later["1.weight"])  # a stream per step
