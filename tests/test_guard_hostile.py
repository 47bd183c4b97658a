"""Client guards under hostile input: a model with a NaN or infinite entry is refused by every guard
before any statistic (a NaN compares false with every threshold), names the tensor, and never becomes
drift-guard's reference; random shapes of non-finite entries never raise out of a guard."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from leakshield.data import load_dataset
from leakshield.defenses import DefensePipeline
from leakshield.fl import HonestClient, LocalTraining
from leakshield.models import create_model

GUARDS = ("row-guard", "drift-guard", "dominance-guard", "loss-guard")
VALUES = [math.nan, math.inf, -math.inf, 1e38]


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", {"channels": 1, "size": 16})


def client(digits, *guards: str) -> HonestClient:
    pipeline = DefensePipeline.from_config([{"name": g, "params": {}} for g in guards])
    return HonestClient(0, digits.train.subset(list(range(64))), LocalTraining(), pipeline, digits.info)


def mlp(digits, seed: int = 0) -> torch.nn.Module:
    return create_model("mlp", {"width": 32}, in_shape=digits.info.shape, num_classes=10, seed=seed)


def poisoned(model: torch.nn.Module, value: float, everywhere: bool) -> torch.nn.Module:
    out = copy.deepcopy(model)
    with torch.no_grad():
        weight = next(p for p in out.parameters() if p.dim() == 2)
        if everywhere:
            for p in out.parameters():
                p.fill_(value)
        else:
            weight[0, 0] = value
    return out


@pytest.mark.parametrize("guard", GUARDS)
@pytest.mark.parametrize(("value", "everywhere"), [(math.nan, True), (math.nan, False), (math.inf, False)])
def test_every_guard_refuses_a_non_finite_model_and_names_the_tensor(digits, guard, value, everywhere):
    honest = client(digits, guard)
    model = mlp(digits)
    generator = torch.Generator().manual_seed(0)
    previous = mlp(digits)  # drift-guard compares with the last accepted model
    verdict = honest.inspect(poisoned(model, value, everywhere), 1, generator, previous=previous)
    assert not verdict.accepted and verdict.reason.startswith(f"{guard}: ")
    assert "non-finite" in verdict.reason and "weight" in verdict.reason and verdict.score == math.inf
    assert honest.inspect(model, 1, generator, previous=previous).accepted  # the honest model passes


def test_an_overflowing_finite_model_is_refused_not_passed_by_nan_statistics(digits):
    """Every entry finite, two layers scaled by 1e30: the logits overflow to NaN, whose statistics
    compare false with every threshold. dominance-guard refuses it, drift-guard too (the change from
    the previous model), and drift-guard refuses a non-finite reference it is handed."""
    model = mlp(digits)
    with torch.no_grad():
        for p in [p for p in model.parameters() if p.dim() == 2][:2]:
            p.mul_(1e30)
    generator = torch.Generator().manual_seed(0)
    verdict = client(digits, "dominance-guard").inspect(model, 1, generator)
    assert not verdict.accepted and "finite" in verdict.reason
    assert not client(digits, "drift-guard").inspect(model, 1, generator, previous=mlp(digits)).accepted
    nan_reference = poisoned(mlp(digits), math.nan, True)
    verdict = client(digits, "drift-guard").inspect(mlp(digits), 1, generator, previous=nan_reference)
    assert not verdict.accepted and "non-finite" in verdict.reason


def test_a_nan_round_never_becomes_drift_guards_reference(digits):
    """The hostile tester's sequence: an honest round, a NaN round, then the first weight layer replaced
    by randn × 10. The NaN model is refused and the tampered one is compared with the honest model the
    client accepted, and refused, as in the control run without the NaN round."""
    honest = mlp(digits)
    tampered = copy.deepcopy(honest)
    with torch.no_grad():
        first = next(p for p in tampered.parameters() if p.dim() == 2)
        first.copy_(torch.randn(first.shape, generator=torch.Generator().manual_seed(1)) * 10)
    for sequence in ([honest, poisoned(honest, math.nan, False), tampered], [honest, tampered]):
        guarded = client(digits, "drift-guard")
        replies = [guarded.fit(model, r) for r, model in enumerate(sequence)]
        assert replies[0] is not None and all(r is None for r in replies[1:])
        assert "moved by" in guarded.refusals[-1][1]
        assert torch.equal(next(guarded.last_accepted.parameters()), next(honest.parameters()))


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    guard=st.sampled_from(GUARDS),
    entries=st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(VALUES)), min_size=0, max_size=5),
)
def test_guards_never_raise_on_random_non_finite_entries(digits, guard, entries):
    model = mlp(digits)
    with torch.no_grad():
        flat = torch.nn.utils.parameters_to_vector(model.parameters())
        for index, value in entries:
            flat[index % len(flat)] = value
        torch.nn.utils.vector_to_parameters(flat, model.parameters())
    verdict = client(digits, guard).inspect(model, 1, torch.Generator().manual_seed(0), previous=mlp(digits))
    if not all(math.isfinite(v) for _, v in entries):
        assert not verdict.accepted and "non-finite" in verdict.reason
    else:  # huge finite entries are judged by the guard's own statistic, whatever it decides
        assert verdict.accepted or verdict.reason.startswith(f"{guard}: ")
