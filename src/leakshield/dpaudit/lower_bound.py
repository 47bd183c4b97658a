"""A lower bound on ε from one training run (Steinke, Nasr & Jagielski, *Privacy Auditing with One (1)
Training Run*, NeurIPS 2023, Theorem 3.1 with the δ term of their §5): m canaries each included by an
independent fair coin; the auditor guesses "included" for the r top-scoring ones; if the mechanism is
(ε, δ)-DP, the number v of correct guesses satisfies

    P[V ≥ v] ≤ P[Bin(r, e^ε/(1+e^ε)) ≥ v] + 2mδ · max_{1≤i≤v} P[v−i ≤ Bin(r, ·) < v] / i.

The largest ε this p-value rejects at the chosen significance is a lower bound on the true ε that holds
with that confidence — rigorous in one run, unlike reading TPR/FPR with Clopper–Pearson intervals,
which assumes independent trials (Jagielski et al. 2020 ran a model per trial). The guess counts r are
fixed before looking (powers of two from 4 to m/2) and their tests share the significance
(Bonferroni), so choosing the best of them keeps the guarantee."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.special import expit
from scipy.stats import binom


def one_run_p_value(canaries: int, guesses: int, correct: int, epsilon: float, delta: float) -> float:
    """The probability of ``correct`` or more right guesses out of ``guesses`` under (ε, δ)-DP."""
    if not 0 <= correct <= guesses <= canaries:
        raise ValueError(f"need 0 ≤ correct ({correct}) ≤ guesses ({guesses}) ≤ canaries ({canaries})")
    p = expit(epsilon)  # the accuracy of ε-DP randomized response
    beta = float(binom.sf(correct - 1, guesses, p))
    if delta == 0 or correct == 0:
        return min(beta, 1.0)
    i = np.arange(1, correct + 1)
    window = binom.sf(correct - i - 1, guesses, p) - beta  # P[correct − i ≤ Bin < correct]
    return float(min(beta + 2 * canaries * delta * np.max(window / i), 1.0))


def one_run_epsilon(canaries: int, guesses: int, correct: int, delta: float, significance: float) -> float:
    """The largest ε whose (ε, δ) claim the count rejects at ``significance`` (0 if none)."""

    def margin(eps: float) -> float:
        return significance - one_run_p_value(canaries, guesses, correct, eps, delta)

    if guesses == 0 or margin(0.0) <= 0:
        return 0.0
    hi = 1.0
    while margin(hi) > 0:
        if hi > 1e3:
            return hi
        hi *= 2
    return float(brentq(margin, hi / 2 if hi > 1 else 0.0, hi, xtol=1e-6))


def guess_counts(canaries: int) -> list[int]:
    """The guess counts tried for ``canaries`` canaries: 4, 8, … up to half of them."""
    counts, r = [], 4
    while r <= canaries // 2:
        counts.append(r)
        r *= 2
    return counts or [max(1, canaries // 2)]


@dataclass(frozen=True)
class LowerBound:
    """ε lower bound at ``confidence``; the guess count r that gave it and how many were right."""

    epsilon: float
    guesses: int
    correct: int
    confidence: float


def one_run_lower_bound(
    in_scores: np.ndarray, out_scores: np.ndarray, delta: float, *, confidence: float = 0.95
) -> LowerBound:
    """ε lower bound from the scores of the included (``in_scores``) and excluded canaries; guesses are
    the r highest scores."""
    x, y = np.asarray(in_scores, dtype=np.float64), np.asarray(out_scores, dtype=np.float64)
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("one_run_lower_bound: a score is not finite (the run diverged?)")
    m = len(x) + len(y)
    scores = np.concatenate([y, x])
    truth = np.concatenate([np.zeros(len(y), bool), np.ones(len(x), bool)])
    # a stable sort on −score puts a tie's held-out canaries first: ties count against the bound
    order = np.argsort(-scores, kind="stable")
    counts = guess_counts(m)
    significance = (1 - confidence) / len(counts)
    best = LowerBound(0.0, 0, 0, confidence)
    for r in counts:
        right = int(truth[order[:r]].sum())
        eps = one_run_epsilon(m, r, right, delta, significance)
        if eps > best.epsilon:
            best = LowerBound(eps, r, right, confidence)
    return best
