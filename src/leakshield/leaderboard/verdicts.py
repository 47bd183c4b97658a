"""A reproduction's verdict from a measured interval: *holds*, *does not hold*, *inconclusive* or *not
run here*, and the row that states it (claim, command, number with interval and n, rule, verdict).

A claim is checked on one quantity (an accuracy, an SSIM, a drop in accuracy). Its *region* is the
paper's value ± a stated tolerance, the values that still count as the paper's finding; a one-sided
claim's region also runs on past the paper's value away from the null (a stronger cut than the paper's
still stops the attack; a gain in accuracy still costs nothing). The *null* is the value the claim
denies: no effect, for a claim that a defense has one, or a stated cost, for a claim that it costs
nothing; it must lie outside the region. The measured 95 % interval then decides, as an equivalence
test does:

- **holds**: the interval lies inside the region (so it also excludes the null);
- **does not hold**: the interval misses the region;
- **inconclusive**: the interval crosses the region's edge, in particular when it holds both the
  paper's value and the null: the run cannot tell them apart (add seeds or victims);
- **not run here**: no measurement (the row gives the estimate instead).

One measurement has no interval and is never more than inconclusive. Intervals are compared at the
three decimals a row prints, so a row's written numbers give its verdict back.

A privacy claim is measured on several model seeds, each attacked on the same victims: the victims of
one model fail together, so the row's unit is the seed (:func:`seed_row`: the interval over the seed
means, never narrower than the one over the victims' means across seeds, and clipped to the score's
range)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from leakshield.leaderboard.intervals import Estimate, estimate, level, t_quantile
from leakshield.leaderboard.leak_rate import clopper_pearson

Verdict = Literal["holds", "does not hold", "inconclusive", "not run here"]
VERDICTS: tuple[Verdict, ...] = ("holds", "does not hold", "inconclusive", "not run here")


@dataclass(frozen=True)
class Claim:
    """A paper's claim on one quantity: its value ± ``tolerance``, ``null`` (the value the claim denies,
    outside that region) and ``one_sided`` (the region runs on past the paper's value away from the
    null)."""

    paper: float
    tolerance: float
    null: float
    one_sided: bool = False

    def __post_init__(self) -> None:
        if not all(math.isfinite(v) for v in (self.paper, self.tolerance, self.null)):
            raise ValueError(f"claim: paper, tolerance and null must be finite numbers, got {self}")
        if self.tolerance < 0:
            raise ValueError(f"claim.tolerance: {self.tolerance} is negative; give a half-width ≥ 0")
        if abs(self.null - self.paper) <= self.tolerance:
            raise ValueError(
                f"claim.null: {self.null} lies within the paper's {self.paper} ± {self.tolerance}; a claim "
                "must be told apart from the value it denies (narrow the tolerance)"
            )

    @property
    def low(self) -> float:
        """The region's lower end (−∞ for a one-sided claim whose null lies above)."""
        return -math.inf if self.one_sided and self.null > self.paper else self.paper - self.tolerance

    @property
    def high(self) -> float:
        """The region's upper end (+∞ for a one-sided claim whose null lies below)."""
        return math.inf if self.one_sided and self.null < self.paper else self.paper + self.tolerance

    def text(self) -> str:
        """``0.15 ± 0.1 · null 1`` or, one-sided, ``≤ 0.25 · null 1`` (the rule column of a row), at the
        three decimals verdicts compare."""
        null = f"null {_short(self.null)}"
        if not self.one_sided:
            return f"{_short(self.paper)} ± {_short(self.tolerance)} · {null}"
        edge = self.high if self.null > self.paper else self.low
        return f"{'≤' if self.null > self.paper else '≥'} {_short(edge)} · {null}"


def _short(value: float) -> str:
    """``value`` at the comparison precision, without trailing zeros (0.25, 1, 80.41)."""
    return format(level(value), "g")


def verdict(claim: Claim, low: float | None, high: float | None, n: int) -> Verdict:
    """The verdict of ``claim`` on a measured interval [``low``, ``high``] of ``n`` values (None, None:
    not run here); compared at the printed precision."""
    if low is None or high is None:
        return "not run here"
    if not (math.isfinite(low) and math.isfinite(high)) or low > high:
        raise ValueError(f"interval: [{low}, {high}] is not an interval of finite numbers, low ≤ high")
    if n < 2:
        return "inconclusive"  # one value has no interval
    low, high, edge_low, edge_high = level(low), level(high), level(claim.low), level(claim.high)
    if high < edge_low or low > edge_high:
        return "does not hold"
    return "holds" if edge_low <= low and high <= edge_high else "inconclusive"


def measured_verdict(claim: Claim, values: Sequence[float]) -> tuple[Estimate, Verdict]:
    """The mean of ``values`` (victims or seeds) with its 95 % t-interval, and the claim's verdict."""
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"values: {list(values)} holds a non-finite value; say what failed instead")
    found = estimate(values)
    return found, verdict(claim, found.low, found.high, found.n)


def seeds_to_decide(claim: Claim, found: Estimate, most: int = 100) -> int | None:
    """How many values (seeds), more than ``found``'s, an interval at its mean and spread would need to
    decide ``claim`` (lie wholly inside or outside its region); None if ``found`` has no spread to scale,
    or if not even ``most`` would (its mean lies near the region's edge)."""
    if found.half_width is None or found.half_width == 0:
        return None
    sd = found.half_width * math.sqrt(found.n) / t_quantile(found.n - 1)
    for n in range(found.n + 1, most + 1):
        half = t_quantile(n - 1) * sd / math.sqrt(n)
        if verdict(claim, found.mean - half, found.mean + half, n) != "inconclusive":
            return n
    return None


def seed_row(
    claim_text: str,
    command: str,
    claim: Claim,
    by_seed: dict[int, Sequence[float]],
    note: str = "",
    *,
    share: bool = False,
    bounds: tuple[float, float] = (-1.0, 1.0),
) -> str:
    """A row whose unit is the model seed: ``by_seed`` holds each seed's scores of the same victims, in
    the same order (0/1 events with ``share``: the share of victims with the event, e.g. rebuilt
    recognizably). The number is the mean of the seed means with the t-interval over them, widened to
    the interval over the victims' means across seeds where that is wider: a victim is the same at every
    seed, and one that is hard on one model tends to be hard on the next. For a share that floor is the
    exact binomial interval of the victims with the event on average over the seeds, counted once each
    (seeds that agree exactly have no spread; 0 of 8 still bounds a share only below 0.369). The interval
    is clipped to ``bounds``, the score's range ([0, 1] for a share). One seed: its mean alone, n = 1,
    the victims' interval in the note, inconclusive."""
    counts = {len(v) for v in by_seed.values()}
    if not by_seed or 0 in counts:
        raise ValueError(f"by_seed: {by_seed!r} needs at least one seed with at least one victim")
    if len(counts) > 1:
        raise ValueError(
            f"by_seed: the seeds hold {sorted(counts)} victims; a row needs the same at every seed"
        )
    if share and any(x not in (0, 1) for v in by_seed.values() for x in v):
        raise ValueError("by_seed: a share row takes 0/1 events (True/False) per victim")
    bounds = (0.0, 1.0) if share else bounds
    rows = [[float(x) for x in v] for _, v in sorted(by_seed.items())]
    if any(not bounds[0] <= x <= bounds[1] for r in rows for x in r):
        raise ValueError(f"by_seed: a score lies outside {list(bounds)}; pass the score's range as bounds")
    victims = counts.pop()
    per_victim = [sum(r[i] for r in rows) / len(rows) for i in range(victims)]
    found = estimate([sum(r) / victims for r in rows])
    unit = "one seed" if found.n == 1 else "per seed"
    said = f"{unit}; {victims} victims{' each' if found.n > 1 else ''}" + (f"; {note}" if note else "")
    if share:
        hits = round(sum(per_victim))
        wide = clopper_pearson(hits, victims)
        total = int(sum(sum(r) for r in rows))
        said += (
            f"; {hits} of {victims}" if found.n == 1 else f"; {total} of {victims * found.n} over the seeds"
        )
    else:
        spread = estimate(per_victim)
        wide = (max(bounds[0], spread.low), min(bounds[1], spread.high))
        if found.n == 1:
            said += f"; the victims' interval [{wide[0]:.3f}, {wide[1]:.3f}]"
    if found.n < 2:
        return _line(claim_text, command, f"{measurement_text(found)} ({said})", claim, "inconclusive")
    low = max(bounds[0], min(found.low, wide[0]))
    high = min(bounds[1], max(found.high, wide[1]))
    return interval_row(claim_text, command, claim, found.mean, (low, high), found.n, said)


def measurement_text(found: Estimate, spec: str = ".3f") -> str:
    """``0.912 [0.874, 0.950], n = 3`` (one value: ``0.912, n = 1``), the number column of a row."""
    mean = format(found.mean, spec)
    if found.half_width is None:
        return f"{mean}, n = {found.n}"
    return f"{mean} [{format(found.low, spec)}, {format(found.high, spec)}], n = {found.n}"


def row(claim_text: str, command: str, claim: Claim, values: Sequence[float] | None, note: str = "") -> str:
    """A reproduction row in the page's format: claim | command | measured (interval, n) | rule | verdict.
    ``values`` None: not run here (``note`` gives the estimate)."""
    if values is None:
        measured, found = "not run here" + (f" ({note})" if note else ""), verdict(claim, None, None, 0)
    else:
        estimate_, found = measured_verdict(claim, values)
        measured = measurement_text(estimate_) + (f" ({note})" if note else "")
    return _line(claim_text, command, measured, claim, found)


def share_row(claim_text: str, command: str, claim: Claim, hits: Sequence[bool], note: str) -> str:
    """A row on the share of ``hits`` (victims with an event, e.g. rebuilt recognizably) with its exact
    (Clopper–Pearson) 95 % interval, which a t-interval of 0/1 values is not (it has no width at 0 of n),
    and the claim's verdict on it; the number column parses back as :func:`row`'s does."""
    n, k = len(hits), sum(hits)
    interval = clopper_pearson(k, n)
    return interval_row(claim_text, command, claim, k / n, interval, n, f"{note}; {k} of {n}, exact binomial")


def interval_row(
    claim_text: str,
    command: str,
    claim: Claim,
    value: float,
    interval: tuple[float, float],
    n: int,
    note: str,
) -> str:
    """A row on one statistic with its own 95 % interval (a correlation's Fisher interval, say) rather
    than a t-interval over values; the number column parses back as :func:`row`'s does."""
    low, high = interval
    measured = f"{value:.3f} [{low:.3f}, {high:.3f}], n = {n} ({note})"
    return _line(claim_text, command, measured, claim, verdict(claim, low, high, n))


def _line(claim_text: str, command: str, measured: str, claim: Claim, found: Verdict) -> str:
    return f"| {claim_text} | {command} | {measured} | {claim.text()} | {found} |"


_NUMBER = r"(-?\d+(?:\.\d+)?(?:e-?\d+)?)"
_MEASURED = re.compile(rf"^{_NUMBER}(?: \[{_NUMBER}, {_NUMBER}\])?, n = (\d+)")
_TWO_SIDED = re.compile(rf"^{_NUMBER} ± {_NUMBER} · null {_NUMBER}$")
_ONE_SIDED = re.compile(rf"^([≤≥]) {_NUMBER} · null {_NUMBER}$")


def parse_rule(rule: str) -> Claim:
    """The claim a row's rule column states (the inverse of :meth:`Claim.text`); ValueError if none."""
    text = rule.strip()
    if found := _TWO_SIDED.match(text):
        return Claim(*(float(v) for v in found.groups()))
    if found := _ONE_SIDED.match(text):
        sign, edge, null = found.group(1), float(found.group(2)), float(found.group(3))
        paper = edge  # a one-sided region is the edge and everything beyond it, away from the null
        if (sign == "≤") != (null > edge):
            raise ValueError(f"rule {rule!r}: the null lies on the claim's side of its edge")
        return Claim(paper, 0.0, null, one_sided=True)
    raise ValueError(f"rule {rule!r} is neither 'paper ± tolerance · null N' nor '≤ edge · null N'")


def check_row(measured: str, rule: str, stated: str) -> str | None:
    """Whether a written row's verdict follows from its own number and rule: None if it does, else why
    not (the number column starts with :func:`measurement_text`'s format, or with ``not run here``)."""
    try:
        claim = parse_rule(rule)
    except ValueError as error:
        return str(error)
    if stated not in VERDICTS:
        return f"verdict {stated!r} is not one of {', '.join(VERDICTS)}"
    if measured.strip().startswith("not run here"):
        expected = verdict(claim, None, None, 0)
    else:
        found = _MEASURED.match(measured.strip())
        if found is None:
            return f"number {measured!r} does not start with 'mean [low, high], n = N' or 'mean, n = 1'"
        mean, low, high, n = found.groups()
        if (low is None) != (int(n) < 2):
            return f"number {measured!r}: an interval needs n ≥ 2, and n ≥ 2 needs its interval"
        expected = verdict(claim, float(low or mean), float(high or mean), int(n))
    return None if expected == stated else f"verdict {stated!r}, but the number and rule give {expected!r}"
