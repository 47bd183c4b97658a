"""Pearson and partial correlations with their 95 % intervals (Fisher's z), for claims that one score
predicts another (ATS's Fig. 5: S_pri against the attack's PSNR over random policies).

The interval of a correlation r over n pairs is tanh(atanh(r) ± 1.96 · s), s = 1 / √(n − 3 − k) with k
the number of variables held fixed (0 for Pearson's r, 1 for a partial correlation on one control)
(Fisher 1924); for Spearman's ρ, s = √((1 + ρ²/2) / (n − 3)) (Bonett & Wright 2000), wider. Both are
approximate for small n; they are what the reproduction rows state, since a t-interval over pairs does
not exist. A perfect correlation (|r| = 1) has no such interval and is refused."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

#: the two-sided 95 % quantile of the standard normal
Z95 = 1.959963984540054


@dataclass(frozen=True)
class Correlation:
    """A correlation ``r`` over ``n`` pairs with ``controls`` variables held fixed, and its interval."""

    r: float
    n: int
    controls: int = 0
    ranked: bool = False  #: Spearman's ρ (Bonett–Wright's wider interval)

    @property
    def interval(self) -> tuple[float, float]:
        """The 95 % Fisher-z interval; needs n > 3 + controls and |r| < 1 (else ValueError)."""
        df = self.n - 3 - self.controls
        if df < 1:
            raise ValueError(
                f"correlation interval: n = {self.n} pairs with {self.controls} controls; need more"
            )
        if abs(self.r) >= 1.0:
            raise ValueError(
                f"correlation interval: r = {self.r} over {self.n} pairs is perfect; no interval"
            )
        spread = (1.0 + self.r**2 / 2.0) if self.ranked else 1.0
        z, half = math.atanh(self.r), Z95 * math.sqrt(spread / df)
        return math.tanh(z - half), math.tanh(z + half)


def _check(*series: Sequence[float]) -> None:
    n = len(series[0])
    if any(len(s) != n for s in series):
        raise ValueError(f"correlation: series of different lengths {[len(s) for s in series]}")
    if n < 3:
        raise ValueError(f"correlation: {n} pairs; need at least 3")
    if not all(math.isfinite(v) for s in series for v in s):
        raise ValueError("correlation: a value is not finite")


def pearson(a: Sequence[float], b: Sequence[float]) -> Correlation:
    """Pearson's r of ``a`` and ``b``; a constant series has no correlation (ValueError)."""
    _check(a, b)
    n = len(a)
    ma, mb = sum(a) / n, sum(b) / n
    sab = sum((x - ma) * (y - mb) for x, y in zip(a, b, strict=True))
    saa, sbb = sum((x - ma) ** 2 for x in a), sum((y - mb) ** 2 for y in b)
    if saa == 0.0 or sbb == 0.0:
        raise ValueError("correlation: a series is constant")
    return Correlation(max(-1.0, min(1.0, sab / math.sqrt(saa * sbb))), n)


def partial(a: Sequence[float], b: Sequence[float], control: Sequence[float]) -> Correlation:
    """The correlation of ``a`` and ``b`` with ``control`` held fixed (first-order partial correlation:
    (r_ab − r_ac·r_bc) / √((1 − r_ac²)(1 − r_bc²)))."""
    _check(a, b, control)
    r_ab, r_ac, r_bc = pearson(a, b).r, pearson(a, control).r, pearson(b, control).r
    denominator = math.sqrt((1.0 - r_ac**2) * (1.0 - r_bc**2))
    if denominator == 0.0:
        raise ValueError("partial correlation: the control explains a series entirely")
    r = (r_ab - r_ac * r_bc) / denominator
    return Correlation(max(-1.0, min(1.0, r)), len(a), controls=1)


def ranks(values: Sequence[float]) -> list[float]:
    """Ranks 1..n, ties at their mean rank (for Spearman's ρ as Pearson's r of ranks)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return out


def spearman(a: Sequence[float], b: Sequence[float]) -> Correlation:
    """Spearman's ρ (Pearson's r of the ranks), with Bonett–Wright's interval."""
    _check(a, b)
    return dataclasses.replace(pearson(ranks(a), ranks(b)), ranked=True)
