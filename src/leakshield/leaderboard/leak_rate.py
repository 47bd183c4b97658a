"""Leakage counted per victim, with seeds as the unit of repetition.

A victim (one private image) is *leaked* when its reconstruction's SSIM is at least :data:`LEAK_SSIM`
(PRECODE's success threshold, Scheliga et al. 2022, §5) **and** above that victim's own
no-information score (the public mean image's SSIM against it; for an attack with a generative prior,
also the prior's draw for its label). The leak rate is the share of leaked victims; victims of one seed
share a model and fail together, so its 95 % interval is Clopper–Pearson at the *effective* sample size
n / deff, with Kish's design effect deff = 1 + (m̄ − 1) ρ and ρ the one-way ANOVA intraclass
correlation of the per-seed counts (Fleiss, *Statistical Methods for Rates and Proportions*, §15).
Where ρ is undefined (no leaked victim, or every victim leaked) it is taken as 1: the seeds alone are
the sample, the conservative reading. Leakage is *measurable* when the interval excludes 0, i.e. when
some victim leaked; the seed-level count ("k of S seeds with a leaked victim") has its own
Clopper–Pearson interval. The leaderboard's headline uses one ρ per table (:mod:`.margin`); rows are
compared in :mod:`.comparisons`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: SSIM at or above which a reconstruction counts as leaking its victim
LEAK_SSIM = 0.6
#: two-sided level of every interval and test here
ALPHA = 0.05

#: an interval rule: (leaked per seed, victims per seed) → (low, high) of the leak rate
IntervalRule = Callable[[Sequence[int], Sequence[int]], tuple[float, float]]


def victim_leaked(ssim: float, reference: float | None) -> bool:
    """Whether a reconstruction with ``ssim`` leaks a victim whose no-information score is ``reference``
    (None: no reference is defined, as for class-level scores)."""
    if not math.isfinite(ssim) or ssim < LEAK_SSIM:
        return False
    return reference is None or round(ssim, 3) > round(reference, 3)


def clopper_pearson(leaked: float, n: float, alpha: float = ALPHA) -> tuple[float, float]:
    """The exact binomial interval of ``leaked`` of ``n`` (real-valued counts allowed: an effective size)."""
    from scipy.stats import beta

    if n <= 0:
        return 0.0, 1.0
    low = 0.0 if leaked <= 0 else float(beta.ppf(alpha / 2, leaked, n - leaked + 1))
    high = 1.0 if leaked >= n else float(beta.ppf(1 - alpha / 2, leaked + 1, n - leaked))
    return low, high


def pooled_icc(rows: Sequence[tuple[Sequence[int], Sequence[int]]]) -> float | None:
    """ρ of binary outcomes clustered by seed: the one-way ANOVA intraclass correlation with the sums of
    squares and their degrees of freedom pooled over ``rows`` ((leaked per seed, victims per seed) each;
    clipped to [0, 1]); None where no row has variation within and between its seeds to estimate it."""
    between = within = df_between = df_within = sizes = 0.0
    for leaked, victims in rows:
        n, seeds = sum(victims), len(victims)
        if seeds < 2 or n <= seeds:
            continue
        p = sum(leaked) / n
        if p in (0.0, 1.0):
            continue
        between += sum(m * (y / m - p) ** 2 for y, m in zip(leaked, victims, strict=True) if m)
        within += sum(y * (1 - y / m) for y, m in zip(leaked, victims, strict=True) if m)
        df_between += seeds - 1
        df_within += n - seeds
        sizes += n - sum(m * m for m in victims) / n
    if df_between == 0 or df_within == 0:
        return None
    msb, msw, size = between / df_between, within / df_within, sizes / df_between
    denominator = msb + (size - 1) * msw
    if denominator <= 0:
        return None
    return min(1.0, max(0.0, (msb - msw) / denominator))


def intraclass_correlation(leaked: Sequence[int], victims: Sequence[int]) -> float | None:
    """ρ of one row's outcomes (:func:`pooled_icc` of that row alone); None where it is undefined: one
    seed, or no variation within and between seeds."""
    return pooled_icc([(leaked, victims)])


def _kish(victims: Sequence[int], rho: float | None) -> float:
    """Kish's design effect 1 + (m̄ − 1) ρ (ρ = 1 when None: every seed counts once)."""
    if not victims or sum(victims) == 0:
        return 1.0
    return 1.0 + (sum(victims) / len(victims) - 1.0) * (1.0 if rho is None else rho)


def design_effect(leaked: Sequence[int], victims: Sequence[int]) -> float:
    """Kish's 1 + (m̄ − 1) ρ with the row's own ρ (ρ = 1 where undefined: every seed counts once)."""
    return _kish(victims, intraclass_correlation(leaked, victims))


def leak_interval(leaked: Sequence[int], victims: Sequence[int], rho: float | None) -> tuple[float, float]:
    """The leak rate's 95 % interval: Clopper–Pearson at n / deff with ``rho`` (the leaderboard passes one
    ρ per table, :func:`pooled_icc` over its rows: the interval is then monotone in the count)."""
    n = sum(victims)
    if n == 0:
        return 0.0, 1.0
    n_eff = n / _kish(victims, rho)
    return clopper_pearson(sum(leaked) / n * n_eff, n_eff)


def clustered_interval(leaked: Sequence[int], victims: Sequence[int]) -> tuple[float, float]:
    """The leak rate's 95 % interval with seeds as clusters, ρ the row's own (Clopper–Pearson at
    n / deff)."""
    return leak_interval(leaked, victims, intraclass_correlation(leaked, victims))


def wald_interval(leaked: Sequence[int], victims: Sequence[int]) -> tuple[float, float]:
    """The textbook p ± 1.96 √(p(1−p)/n), victims taken as independent: 0 of n gives [0, 0]. Not used by
    the leaderboard; the power check shows why (:mod:`leakshield.leaderboard.power`)."""
    n = sum(victims)
    if n == 0:
        return 0.0, 1.0
    p = sum(leaked) / n
    half = 1.959964 * math.sqrt(p * (1 - p) / n)
    return max(0.0, p - half), min(1.0, p + half)


@dataclass(frozen=True)
class LeakRate:
    """Leaked victims per seed, and the rate's interval."""

    seeds: tuple[int, ...]
    leaked: tuple[int, ...]
    victims: tuple[int, ...]
    low: float
    high: float

    @property
    def rate(self) -> float:
        total = sum(self.victims)
        return sum(self.leaked) / total if total else 0.0

    @property
    def seeds_leaking(self) -> int:
        """How many seeds have a leaked victim."""
        return sum(1 for y in self.leaked if y > 0)

    @property
    def measurable(self) -> bool:
        """Whether the interval excludes 0 (with the leaderboard's interval: some victim leaked)."""
        return self.low > 0

    def per_seed(self) -> dict[int, float]:
        """Seed → its share of leaked victims."""
        return {s: y / m for s, y, m in zip(self.seeds, self.leaked, self.victims, strict=True) if m}

    def text(self) -> str:
        """``3/16 = 0.19 [0.04, 0.46]``."""
        return f"{sum(self.leaked)}/{sum(self.victims)} = {self.rate:.2f} [{self.low:.2f}, {self.high:.2f}]"

    def seeds_text(self) -> str:
        """``2 of 8 [0.03, 0.65]``."""
        return seeds_text(self.seeds_leaking, len(self.seeds))


def seeds_text(leaking: int, seeds: int) -> str:
    """``2 of 8 [0.03, 0.65]``: ``leaking`` of ``seeds`` seeds with a leaked victim, and the share's
    Clopper–Pearson interval."""
    low, high = clopper_pearson(leaking, seeds)
    return f"{leaking} of {seeds} [{low:.2f}, {high:.2f}]"


def leak_rate(
    seeds: Sequence[int],
    leaked: Sequence[int],
    victims: Sequence[int],
    interval: IntervalRule = clustered_interval,
) -> LeakRate:
    """The leak rate of per-seed counts, with ``interval``'s bounds."""
    low, high = interval(leaked, victims)
    return LeakRate(tuple(seeds), tuple(leaked), tuple(victims), low, high)
