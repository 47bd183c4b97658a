"""Seed means with 95 % confidence intervals (Student's t over the seeds), the test of measurable
leakage against a no-information level, and interval overlap (the leaderboard's ties)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: decimals at which SSIMs are compared (and shown)
PRECISION = 3


def level(value: float) -> float:
    """A score at the comparison precision."""
    return round(value, PRECISION)


def t_quantile(df: int) -> float:
    """The two-sided 95 % quantile of Student's t with ``df`` degrees of freedom."""
    from scipy.stats import t

    return float(t.ppf(0.975, df))


@dataclass(frozen=True)
class Estimate:
    """A seed mean and the half-width of its 95 % interval (None from one seed: no interval)."""

    mean: float
    half_width: float | None
    n: int

    @property
    def low(self) -> float:
        return self.mean - (self.half_width or 0.0)

    @property
    def high(self) -> float:
        return self.mean + (self.half_width or 0.0)

    def overlaps(self, other: Estimate) -> bool:
        """Whether the two intervals meet (at the comparison precision); from one seed each, equality."""
        return level(self.low) <= level(other.high) and level(other.low) <= level(self.high)

    def above(self, reference: float) -> bool:
        """Measurably above ``reference``: the whole interval (the value, from one seed) lies above it."""
        return level(self.low) > level(reference)

    def text(self, spec: str = ".3f") -> str:
        """``0.412 ± 0.031`` (or the mean alone from one seed)."""
        mean = format(self.mean, spec)
        return mean if self.half_width is None else f"{mean} ± {format(self.half_width, spec)}"


def estimate(values: Sequence[float]) -> Estimate:
    """The mean of ``values`` and its 95 % t-interval half-width (None for fewer than two values)."""
    n = len(values)
    if n == 0:
        raise ValueError("estimate of no values")
    mean = sum(values) / n
    if n < 2:
        return Estimate(mean, None, n)
    variance = sum((v - mean) ** 2 for v in values) / (n - 1)
    return Estimate(mean, t_quantile(n - 1) * math.sqrt(variance / n), n)
