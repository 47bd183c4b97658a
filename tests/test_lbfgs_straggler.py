"""L-BFGS's evaluation budget (``lbfgs_max_evaluations``), the straggler policy of batched runs: the
one-victim engine and the batched one count the same evaluations, stop at the same outer step and
record it; without the bound nothing changes."""

import pytest
import torch

from leakshield.attacks import create_attack
from leakshield.data import load_dataset
from leakshield.fl import server_view_of
from leakshield.models import create_model

SETTING = {"iterations": 6, "lbfgs_max_iter": 8, "tolerance": 0.0}  # nobody stops early by tolerance


@pytest.fixture(scope="module")
def views():
    data = load_dataset("digits", {"channels": 1, "size": 16})
    torch.manual_seed(0)
    model = create_model("lenet", in_shape=data.info.shape, num_classes=10).eval()
    return [server_view_of(model, data.train.subset([i]), data.info) for i in range(3)]


def _counts(reconstructions):
    return [(r.stats["evaluations"], r.stats["evaluation_budget_hit"]) for r in reconstructions]


def test_the_budget_stops_each_victim_after_the_step_that_reaches_it_in_both_engines(views):
    free = create_attack("idlg", {**SETTING, "path": "vectorized"}).reconstruct_many(views, seeds=[0, 1, 2])
    bounded = {**SETTING, "lbfgs_max_evaluations": 12}
    many = create_attack("idlg", {**bounded, "path": "vectorized"}).reconstruct_many(views, seeds=[0, 1, 2])
    alone = [create_attack("idlg", bounded).reconstruct(v, seed=k) for k, v in enumerate(views)]
    unbounded = [spent for spent, hit in _counts(free)]
    assert all(hit == 0 for _, hit in _counts(free))
    assert all(spent > 23 for spent in unbounded)  # 6 outer steps of up to 11 evaluations each
    # each engine stopped after the outer step that reached 12 (one step spends at most 1 + 10); measured
    # here, both counted the same evaluations (an exact equality would rest on float rounding, which can
    # flip a line-search decision between the engines)
    for spent, hit in _counts(many) + _counts(alone):
        assert hit == 1 and 12 <= spent <= 12 + 11
    # the bound ends the run early; what it ran is the unbounded run's beginning
    for bounded_run, full in zip(many, free, strict=True):
        assert bounded_run.stats["grad_distance"] >= full.stats["grad_distance"] * (1 - 1e-6)


def test_without_a_budget_the_counts_are_recorded_and_nothing_stops(views):
    alone = create_attack("idlg", {**SETTING, "iterations": 2}).reconstruct(views[0], seed=0)
    assert alone.stats["evaluation_budget_hit"] == 0 and alone.stats["evaluations"] >= 2
    adam = create_attack("ig", {"iterations": 3}).reconstruct(views[0], seed=0)
    assert "evaluations" not in adam.stats  # the count is L-BFGS's


def test_the_budget_is_a_parameter_with_a_one_line_error():
    with pytest.raises(ValueError, match="lbfgs_max_evaluations"):
        create_attack("idlg", {"lbfgs_max_evaluations": 0})
