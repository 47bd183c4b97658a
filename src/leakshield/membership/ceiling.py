"""What differential privacy allows a membership attack, and an audit of a measured ROC against it.

An (ε, δ)-DP mechanism bounds every test of "record in" against "record out" (Kairouz, Oh & Viswanath,
*The Composition Theorem for Differential Privacy*, ICML 2015, Thm. 2.1): TPR ≤ e^ε·FPR + δ and
1 − FPR ≤ e^ε·(1 − TPR) + δ, i.e. TPR ≤ 1 − e^−ε·(1 − δ − FPR). :func:`dp_ceiling` draws that region.

:func:`audit` is the empirical lower bound on ε of Jagielski, Ullman & Oprea (*Auditing Differentially
Private Machine Learning*, NeurIPS 2020): at a few thresholds (the non-members' score quantiles at
:data:`AUDIT_FPR`), one-sided Clopper–Pearson bounds (TPR from below, FPR from above, Bonferroni over
both bounds of every threshold), and the largest ε those bounds force. A correctly accounted defense
has ε_low ≤ ε (at 1 − α confidence); an accountant that under-reports ε, or an attack that counts a
record twice, is caught when ε_low exceeds it. It is a heuristic for one training run: its records are
treated as independent trials, and members are a random half of each client's pool where the one-run
audit of Steinke, Nasr & Jagielski (NeurIPS 2023) draws an independent coin per record and bounds the
count of correct guesses with its own δ term. A violation is evidence, not proof.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: the FPR levels at whose thresholds an audit tests the DP ceiling
AUDIT_FPR = (0.01, 0.05, 0.1, 0.25, 0.5)


def dp_ceiling(fpr: float | np.ndarray, epsilon: float, delta: float) -> np.ndarray:
    """The largest TPR an (ε, δ)-DP mechanism allows at ``fpr`` (Kairouz et al., Thm. 2.1)."""
    fpr = np.asarray(fpr, dtype=float)
    if epsilon < 0 or not 0 <= delta < 1:
        raise ValueError(f"(ε, δ) = ({epsilon}, {delta}): needs ε ≥ 0 and 0 ≤ δ < 1")
    if math.isinf(epsilon):
        return np.ones_like(fpr)
    first = math.exp(epsilon) * fpr + delta
    second = 1 - math.exp(-epsilon) * (1 - delta - fpr)
    return np.clip(np.minimum(first, second), 0.0, 1.0)


def clopper_pearson(successes: int, trials: int, alpha: float) -> tuple[float, float]:
    """The one-sided Clopper–Pearson bounds (lower, upper), each at level 1 − ``alpha``: the ends of the
    leaderboard's two-sided exact interval at 2·``alpha``."""
    from leakshield.leaderboard.leak_rate import clopper_pearson as two_sided

    return two_sided(successes, trials, 2 * alpha)


def _forced_epsilon(tpr_low: float, fpr_high: float, delta: float) -> float:
    """The smallest ε for which (fpr_high, tpr_low) lies inside the (ε, δ) region (0 when any does)."""
    found = 0.0
    if tpr_low - delta > 0 and fpr_high > 0:
        found = max(found, math.log((tpr_low - delta) / fpr_high))
    if (1 - delta - fpr_high) > 0 and (1 - tpr_low) > 0:  # TPR ≤ 1 − e^−ε (1 − δ − FPR)
        found = max(found, math.log((1 - delta - fpr_high) / (1 - tpr_low)))
    elif tpr_low >= 1 and 1 - delta - fpr_high > 0:
        found = math.inf
    return found


@dataclass(frozen=True)
class Audit:
    """ε_low: the largest ε the measured ROC forces at 1 − α confidence; ``point``: (FPR upper bound,
    TPR lower bound) of the threshold that forced it; ``violates``: ε_low > the reported ε."""

    epsilon_low: float
    epsilon: float
    delta: float
    point: tuple[float, float]
    alpha: float
    #: the largest ε this many records could ever force (:func:`audit_reach`)
    reach: float = math.inf

    @property
    def vacuous(self) -> bool:
        """Whether the reported ε is beyond the audit's reach: "within" then says nothing."""
        return self.epsilon >= self.reach

    @property
    def violates(self) -> bool:
        return self.epsilon_low > self.epsilon + 1e-9

    def text(self) -> str:
        verdict = "exceeds the DP ceiling" if self.violates else "within the DP ceiling"
        if self.vacuous and not self.violates:
            verdict += f" (vacuously: these records can force at most {self.reach:.2f})"
        return (f"empirical ε ≥ {self.epsilon_low:.2f} ({1 - self.alpha:.0%} confidence) against reported "
                f"ε = {self.epsilon:.2f}, δ = {self.delta:g}: {verdict}")  # fmt: skip


def audit_reach(members: int, nonmembers: int, delta: float = 0.0, alpha: float = 0.05) -> float:
    """The largest ε :func:`audit` can ever force from ``members`` and ``nonmembers`` records: that of a
    perfect attack (every member above every non-member). A reported ε above it is "within" whatever
    the attack or the accountant does — about 5.1 from 900 records a side, 5.4 from 1,200."""
    each = alpha / (2 * len(AUDIT_FPR))
    tpr_low, _ = clopper_pearson(members, members, each)
    _, fpr_high = clopper_pearson(0, nonmembers, each)
    return _forced_epsilon(tpr_low, fpr_high, delta)


def audit(
    members: np.ndarray, nonmembers: np.ndarray, epsilon: float, delta: float, alpha: float = 0.05
) -> Audit:
    """Audit scores of ``members`` and ``nonmembers`` (higher = member) against a reported (ε, δ)."""
    pos, neg = np.asarray(members, dtype=float), np.asarray(nonmembers, dtype=float)
    if len(pos) == 0 or len(neg) == 0:
        raise ValueError("an audit needs members and non-members")
    each = alpha / (2 * len(AUDIT_FPR))  # Bonferroni: two bounds per threshold
    best, point = 0.0, (1.0, 0.0)
    for level in AUDIT_FPR:
        threshold = float(np.quantile(neg, 1 - level, method="higher"))
        tp, fp = int((pos > threshold).sum()), int((neg > threshold).sum())
        tpr_low, _ = clopper_pearson(tp, len(pos), each)
        _, fpr_high = clopper_pearson(fp, len(neg), each)
        forced = _forced_epsilon(tpr_low, fpr_high, delta)
        if forced > best:
            best, point = forced, (fpr_high, tpr_low)
    return Audit(
        best, float(epsilon), float(delta), point, alpha, audit_reach(len(pos), len(neg), delta, alpha)
    )
