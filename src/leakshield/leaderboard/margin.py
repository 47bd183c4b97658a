"""The leaderboard's score: how far each victim's reconstruction rises above what the attacker could
guess without the update, with seeds as the unit of repetition.

Per victim the **margin** is max(SSIM − own no-information score, 0), rounded to 3 decimals (the
no-information score: the public mean image's SSIM against that victim, or the generative prior's draw
for an attack with a prior, whichever is higher; a class-level score has none recorded, so its margin is
the class SSIM itself). A victim is **leaked** when its margin is positive and its SSIM is at least 0.6
(:func:`.leak_rate.victim_leaked`). Per seed: the mean margin and the share of leaked victims.

A row's headline gives both, each with a 95 % interval whose bounds stay inside [0, 1]:

* the mean margin: Student's t over the seed means (df = seeds − 1), intersected with [0, 1] (the
  intersection of a confidence set with the parameter space keeps its coverage);
* the leak rate: Clopper–Pearson at the effective size n / deff, deff = 1 + (m̄ − 1) ρ with one ρ per
  table — the ANOVA intraclass correlation pooled over its rows' seeds (:func:`.leak_rate.pooled_icc`,
  :func:`.leak_rate.leak_interval`; Fleiss, *Statistical Methods for Rates and Proportions*, §15; ρ = 1
  where no row gives it). With ρ fixed for the table the interval is monotone in the count, which a
  per-row ρ from a few clusters was not (8/8 gave [0.40, 1.00] but 7/8 [0.47, 1.00]).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from leakshield.leaderboard.intervals import t_quantile


def victim_margin(ssim: float | None, reference: float | None) -> float:
    """max(``ssim`` − ``reference``, 0) at 3 decimals (no reference: the score itself; no score: 0)."""
    if ssim is None or not math.isfinite(ssim):
        return 0.0
    return round(max(ssim - (reference if reference is not None else 0.0), 0.0), 3)


@dataclass(frozen=True)
class Bounded:
    """A mean over seeds with a 95 % interval inside [0, 1] (``low`` = ``high`` = mean from one seed)."""

    mean: float
    low: float
    high: float
    n: int

    def text(self, spec: str = ".3f") -> str:
        """``0.214 [0.127, 0.301]`` (from one seed: the mean alone, or with the interval of an error the
        seeds do not show, and ``(one seed)``)."""
        interval = f" [{format(self.low, spec)}, {format(self.high, spec)}]"
        if self.n < 2:
            return f"{format(self.mean, spec)}{interval if self.high > self.low else ''} (one seed)"
        return f"{format(self.mean, spec)}{interval}"


def bounded_mean(values: Sequence[float], extra_variance: float = 0.0) -> Bounded:
    """The mean of ``values`` with its 95 % t-interval (df = n − 1) intersected with [0, 1];
    ``extra_variance``: a variance of the mean the seeds do not show (a shared test set's binomial error),
    added to theirs."""
    n = len(values)
    if n == 0:
        raise ValueError("a mean of no values")
    mean = sum(values) / n
    spread = sum((v - mean) ** 2 for v in values) / (n - 1) / n if n > 1 else 0.0
    variance = spread + extra_variance
    if n < 2 and extra_variance <= 0:
        return Bounded(mean, mean, mean, n)
    quantile = t_quantile(n - 1) if n > 1 else 1.959964
    half = quantile * math.sqrt(variance)
    return Bounded(mean, max(0.0, mean - half), min(1.0, mean + half), n)
