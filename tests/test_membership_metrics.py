"""Membership error rates, the DP ceiling and its audit: exact small cases, agreement with independent
implementations, and the audit's rates on a mechanism whose ε is known (the planted effect and the null)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from leakshield.membership.ceiling import AUDIT_FPR, audit, audit_reach, clopper_pearson, dp_ceiling
from leakshield.membership.roc import roc, split_scores


def test_roc_hand_computed():
    curve = roc([3.0, 2.0, 0.5], [1.0, 0.0, -1.0, 2.0])
    # thresholds 3, 2, 1, 0.5, 0, −1
    assert curve.fpr.tolist() == [0.0, 0.0, 0.25, 0.5, 0.5, 0.75, 1.0]
    assert curve.tpr.tolist() == pytest.approx([0.0, 1 / 3, 2 / 3, 2 / 3, 1.0, 1.0, 1.0])
    assert curve.tpr_at(0.0) == pytest.approx(1 / 3)
    assert curve.tpr_at(0.25) == pytest.approx(2 / 3)
    assert curve.tpr_at(0.5) == 1.0
    # Mann–Whitney: pairs (member > non-member) + ½ ties over 12 pairs: 3 + (2 + ½) + 2 = 10.5... counted:
    wins = sum((m > n) + 0.5 * (m == n) for m in [3.0, 2.0, 0.5] for n in [1.0, 0.0, -1.0, 2.0])
    assert curve.auc == pytest.approx(wins / 12)


def test_roc_agrees_with_sklearn_and_ties_move_diagonally():
    from sklearn.metrics import roc_auc_score, roc_curve

    rng = np.random.default_rng(0)
    members = np.round(rng.normal(0.7, 1, 300), 1)  # rounding makes ties
    nonmembers = np.round(rng.normal(0, 1, 500), 1)
    curve = roc(members, nonmembers)
    labels = np.r_[np.ones(300), np.zeros(500)]
    scores = np.r_[members, nonmembers]
    assert curve.auc == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    fpr, tpr, _ = roc_curve(labels, scores, drop_intermediate=False)
    for level in (0.001, 0.01, 0.1, 0.5):
        assert curve.tpr_at(level) == pytest.approx(tpr[fpr <= level].max())


def test_roc_refuses_nan_and_empty():
    with pytest.raises(ValueError, match="NaN"):
        roc([0.1, float("nan")], [0.0])
    with pytest.raises(ValueError, match="members and non-members"):
        roc([], [0.0])
    with pytest.raises(ValueError, match="FPR level"):
        roc([1.0], [0.0]).tpr_at(1.5)


def test_split_scores_reads_labels():
    curve = split_scores(np.array([5.0, 1.0, 4.0, 0.0]), np.array([True, False, True, False]))
    assert curve.tpr_at(0.0) == 1.0 and curve.auc == 1.0


def test_dp_ceiling_region():
    fpr = np.array([0.0, 0.01, 0.1, 0.5, 1.0])
    assert dp_ceiling(fpr, 0.0, 0.0) == pytest.approx(fpr)  # ε = 0: no test beats a coin
    assert dp_ceiling(fpr, math.inf, 0.0) == pytest.approx(np.ones(5))
    eps, delta = 1.0, 1e-5
    got = dp_ceiling(fpr, eps, delta)
    assert got[1] == pytest.approx(math.e * 0.01 + delta)
    assert got[3] == pytest.approx(1 - math.exp(-1) * (1 - delta - 0.5))  # the second branch binds
    assert np.all(np.diff(got) >= 0) and got[-1] == 1.0
    with pytest.raises(ValueError):
        dp_ceiling(fpr, -1, 0)


def test_clopper_pearson_agrees_with_scipy():
    from scipy.stats import binomtest

    for k, n in [(0, 50), (3, 50), (49, 50), (50, 50), (120, 400)]:
        low, high = clopper_pearson(k, n, 0.025)
        ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
        assert low == pytest.approx(ci.low, abs=1e-9) and high == pytest.approx(ci.high, abs=1e-9)


def _randomized_response(eps: float, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Scores of an exactly ε-DP mechanism (randomized response on one bit), members and non-members."""
    keep = math.exp(eps) / (1 + math.exp(eps))
    members = (rng.random(n) < keep).astype(float) + rng.random(n) * 1e-3  # tiny jitter: no ties
    nonmembers = (rng.random(n) < 1 - keep).astype(float) + rng.random(n) * 1e-3
    return members, nonmembers


def test_audit_null_rate_and_power_on_a_mechanism_of_known_epsilon():
    """Null: an exactly ε-DP mechanism audited at its true ε — the audit must say "exceeds" in at most
    α = 5 % of 200 trials (measured: 0 of 200; Bonferroni makes it conservative). Planted: the same
    mechanism audited at ε/4 (an accountant that under-reports) is caught in every trial, at 0.8 (20 %
    under) in most, and ε_low approaches the true ε with many records."""
    rng = np.random.default_rng(7)
    eps = 1.0
    null = [audit(*_randomized_response(eps, 2000, rng), eps, 1e-5).violates for _ in range(200)]
    planted = [audit(*_randomized_response(eps, 2000, rng), eps / 4, 1e-5).violates for _ in range(200)]
    slight = [audit(*_randomized_response(eps, 2000, rng), 0.8, 1e-5).violates for _ in range(200)]
    assert sum(null) / 200 <= 0.05
    assert sum(planted) / 200 == 1.0
    assert sum(slight) / 200 >= 0.85  # a 20 % under-report: measured 186 of 200
    large = audit(*_randomized_response(eps, 50_000, rng), eps, 1e-5)
    assert 0.8 < large.epsilon_low <= eps


def test_audit_sees_nothing_in_identical_scores():
    rng = np.random.default_rng(1)
    found = [audit(rng.normal(size=500), rng.normal(size=500), 0.0, 0.0).epsilon_low for _ in range(100)]
    assert np.mean(np.array(found) > 0) <= 0.05  # ε = 0 is the truth: forced above it at most α (0 of 100)


def test_audit_bounds_are_bonferroni_corrected():
    """The forced ε of a hand case equals the one computed from Clopper–Pearson bounds at α/(2·5): 50
    members above all 100 non-members; the 1 % threshold (no non-member above it) forces the most."""
    members, nonmembers = np.arange(100, 150, dtype=float), np.arange(100, dtype=float)
    found = audit(members, nonmembers, 10.0, 0.0)
    each = 0.05 / (2 * len(AUDIT_FPR))
    tpr_low, _ = clopper_pearson(50, 50, each)
    _, fpr_high = clopper_pearson(0, 100, each)  # the 1 % threshold: no non-member above it
    expected = max(math.log(tpr_low / fpr_high), math.log((1 - fpr_high) / (1 - tpr_low)))
    assert found.epsilon_low == pytest.approx(expected)
    assert found.point == pytest.approx((fpr_high, tpr_low))
    assert not found.violates and audit(members, nonmembers, 1.0, 0.0).violates
    assert found.reach == pytest.approx(audit_reach(50, 100, 0.0))  # a perfect attack: what n allows
    assert audit_reach(1200, 1200, 1e-5) == pytest.approx(5.42, abs=0.01)
    assert found.vacuous and not audit(members, nonmembers, 1.0, 0.0).vacuous


def test_chance_tpr_is_what_a_guess_scores():
    from leakshield.membership.roc import chance_tpr

    rng = np.random.default_rng(5)
    guesses = [roc(rng.random(150), rng.random(150)).tpr_at(0.01) for _ in range(4000)]
    assert chance_tpr(150, 0.01) == pytest.approx(2 / 151)
    assert np.mean(guesses) == pytest.approx(chance_tpr(150, 0.01), abs=0.002)  # measured 0.0136
