"""Membership inference on real digits: FedMIA's calibration against the loss threshold on a model that
overfits its client, and the DP ceiling as a soundness check of attack and accountant.

The model that overfits a client is the first round's local model: 5 epochs of SGD from the untrained
global model on the client's 15 records alone (test accuracy of the global model after that round:
0.65–0.80). FedMIA's test (its per-round "all for one" Φ of the cosine statistic, fitted to the other
19 clients) and the loss threshold (Yeom et al.) read the same round."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from leakshield.leaderboard.intervals import estimate
from leakshield.membership.ceiling import audit
from leakshield.membership.config import MembershipConfig, MembershipRow
from leakshield.membership.roc import chance_tpr, split_scores
from leakshield.membership.run import run_seed

FIRST_ROUND = MembershipConfig(rounds=1)


def _tpr(run, cell: str) -> float:
    return split_scores(run.array(cell), np.asarray(run.member)).tpr_at(0.01)


def test_fedmia_beats_the_loss_threshold_on_a_client_overfit_model():
    """Per seed (6; 300 members, 300 non-members each), TPR at 1 % FPR. Measured: FedMIA's test 0.161
    (0.080–0.233 over seeds), the loss threshold 0.088 (0.047–0.133), paired difference +0.073 with
    the 95 % interval [+0.029, +0.116]; a guess scores 4/301 = 0.013. With the non-member Gaussian
    fitted to the target client itself (the broken step), every score is Φ(0) and this fails; with the
    target merely added to the other 19, it still passes (``test_fedmia_never_fits_its_reference_to_the_
    owner`` catches that one)."""
    runs = [run_seed(FIRST_ROUND, MembershipRow(label="none"), seed) for seed in range(6)]
    fedmia = [_tpr(r, "fedmia-round@0") for r in runs]
    loss = [_tpr(r, "loss@0") for r in runs]
    difference = estimate([a - b for a, b in zip(fedmia, loss, strict=True)])
    assert difference.low > 0, (fedmia, loss)
    chance = chance_tpr(300, 0.01)  # what a guess scores (4/301)
    assert estimate(loss).low > chance and estimate(fedmia).low > chance


@pytest.fixture
def dp_runs():
    return _dp_runs()


@functools.cache  # once per process: a module fixture is rebuilt when xdist interleaves other files
def _dp_runs():
    """DP-SGD at two noise levels on the first round (σ 3: ε 3.43; σ 5: ε 1.88; δ 1e-5), 4 seeds: both ε
    within the audit's reach (5.42 from 1,200 records a side), so "within" can fail."""
    found = {}
    for sigma in (3.0, 5.0):
        row = MembershipRow(label=f"dp {sigma}", stack=[{"name": "dp-sgd", "noise_multiplier": sigma}])
        found[sigma] = [run_seed(FIRST_ROUND, row, seed) for seed in range(4)]
    return found


def _audit(runs, epsilon: float | None = None):
    """The audit of the loss threshold's scores on every candidate of ``runs``, pooled. The cell is fixed
    (the one that forced most in a pilot of these settings); one audit per setting, no best-of-cells."""
    cell = "loss@0"
    member = [np.asarray(r.member) for r in runs]
    positives = np.concatenate([r.array(cell)[m] for r, m in zip(runs, member, strict=True)])
    negatives = np.concatenate([r.array(cell)[~m] for r, m in zip(runs, member, strict=True)])
    held = runs[0].guarantee(server=True)
    assert held is not None
    return audit(positives, negatives, held.epsilon if epsilon is None else epsilon, held.delta)


def test_dp_sgd_stays_under_its_ceiling(dp_runs):
    """Measured ε forced (95 %): 0.224 at σ 3 (ε 3.43) and 0.068 at σ 5 (ε 1.88): inside, where the audit
    could have seen up to 5.42."""
    for sigma, runs in dp_runs.items():
        held = runs[0].guarantee(server=True)
        assert held is not None and held.unit == "record"
        found = _audit(runs)
        assert not found.vacuous, (sigma, found.text())  # ε below what these records could force
        assert not found.violates, (sigma, found.text())


def test_an_accountant_that_under_reports_is_caught(dp_runs, monkeypatch):
    """The same DP-SGD runs, re-accounted by a mutant accountant reporting ε/100 (through the real
    code: the defense's privacy_spent; the training is the same, only ε changes): the measured ROC
    forces more than that. The audit's power here is what the attack forces (0.07–0.22): an accountant
    that reports more than that passes, however wrong."""
    from leakshield.defenses import dpsgd

    true_epsilon = dpsgd.dp_epsilon
    monkeypatch.setattr(dpsgd, "dp_epsilon", lambda *a, **k: true_epsilon(*a, **k) / 100)
    for sigma, runs in dp_runs.items():
        row = MembershipRow(label=f"dp {sigma}", stack=[{"name": "dp-sgd", "noise_multiplier": sigma}])
        mutant = run_seed(FIRST_ROUND, row, 0)  # one seed: the mutant changes ε, never the training
        reported = mutant.guarantee(server=True).epsilon
        assert reported == pytest.approx(runs[0].guarantee(server=True).epsilon / 100)
        assert mutant.scores == runs[0].scores
        assert _audit(runs, reported).violates, sigma
