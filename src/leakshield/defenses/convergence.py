"""Whether a fitted defense's budget reached convergence: a criterion of each defense's own, stored in its
fitted artifact and carried to the utility cell, so a leaderboard row trained on an under-budget fit
says so with the measured gap instead of passing a half-fitted defense off as the paper's.

Three kinds of criterion, each on an objective where lower is better:

- ``reference``: the objective at the run's budget against its value at the paper's budget, measured on
  a small probe where the paper's budget is cheap (LODA's encoder, DCS²'s synthesis). The budget meets
  it when it buys at least :data:`REACHED` of the paper budget's improvement over the start.
- ``floor``: the objective against the level real data reach (Anti-GAN's generator against the public
  images of the same classes); met at :data:`REACHED` of the way from the start to that level.
- ``plateau``: where the paper's budget costs as much as the fit itself (Anti-GAN's second stage, DM's
  synthetic set), the objective on a fixed probe at the start, at 80 % and 90 % of the budget
  (:func:`tail_steps`) and at its end; the budget meets it when neither tail probe is further from the
  end than :data:`FLAT` of the whole improvement.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

#: ``reference``: the share of the paper budget's improvement a run must reach
REACHED = 0.9
#: ``plateau``: the points of the budget (shares of its steps) probed before its end
TAIL = (0.8, 0.9)
#: ``plateau``: the most of the improvement those last steps may still buy
FLAT = 0.1
#: the key under which a fitted artifact's metadata holds its :class:`Convergence` (or a list, one per
#: stage of a fit)
METADATA_KEY = "convergence"


@dataclass(frozen=True)
class Convergence:
    """One fit's criterion. ``objective``: what was measured (lower is better); ``steps``: the run's
    budget; ``start`` / ``value``: the objective before the fit and after it; ``compare``: the objective
    at the paper's budget ``compare_steps`` (kind ``reference``), the level of real data (kind
    ``floor``, described by ``target``), or at the tail probe ``compare_steps`` furthest from ``value``
    (kind ``plateau``; the start where the budget is too short for a tail probe)."""

    defense: str
    objective: str
    kind: Literal["reference", "floor", "plateau"]
    steps: int
    compare_steps: int
    start: float
    value: float
    compare: float
    target: str = ""

    @property
    def measure(self) -> float:
        """``reference``: the share of the paper budget's improvement reached (1 where the paper's budget
        improves nothing); ``plateau``: the share of the whole improvement bought by the last steps, in
        absolute value (a GAN may also worsen late); inf where the fit improved nothing."""
        if self.kind in ("reference", "floor"):
            gain = self.start - self.compare
            return 1.0 if gain <= 0 else (self.start - self.value) / gain
        gain = self.start - self.value
        return math.inf if gain <= 0 else abs(self.compare - self.value) / gain

    @property
    def met(self) -> bool:
        if self.kind == "reference":
            return self.steps >= self.compare_steps or self.measure >= REACHED
        if self.kind == "floor":
            return self.measure >= REACHED
        return self.measure <= FLAT

    def text(self) -> str:
        """One line: the defense, the objective and the measured gap against the criterion."""
        what = f"{self.defense} ({self.objective})"
        if self.kind == "reference":
            return (f"{what}: {self.steps} steps bought {self.measure:.0%} of the improvement "
                    f"{self.compare_steps} steps buy (needs ≥ {REACHED:.0%})")  # fmt: skip
        if self.kind == "floor":
            return (f"{what}: {self.steps} steps went {self.measure:.0%} of the way from its start to "
                    f"{self.target} (needs ≥ {REACHED:.0%})")  # fmt: skip
        if math.isinf(self.measure):
            return f"{what}: no improvement over {self.steps} steps"
        return (f"{what}: its last {self.steps - self.compare_steps} of {self.steps} steps still moved "
                f"it by {self.measure:.0%} of its whole improvement (needs ≤ {FLAT:.0%})")  # fmt: skip

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Convergence:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def tail_steps(steps: int) -> list[int]:
    """The steps at which a ``plateau`` criterion probes the tail (80 % and 90 % of ``steps``, those
    strictly inside it; none for a budget too short to have a tail)."""
    return sorted({round(share * steps) for share in TAIL} - {0, steps})


def reference(
    defense: str, objective: str, steps: int, paper_steps: int, start: float, value: float, compare: float
) -> Convergence:
    """A ``reference`` criterion: the objective at the run's ``steps`` (``value``) against its value at
    the paper's ``paper_steps`` (``compare``), both from ``start``."""
    return Convergence(defense, objective, "reference", steps, paper_steps, start, value, compare)


def plateau(
    defense: str, objective: str, steps: int, start: float, value: float, tail: dict[int, float]
) -> Convergence:
    """A ``plateau`` criterion from the tail probes (step → objective): the one furthest from ``value``
    (none: the start, so a budget without a tail never passes)."""
    at = max(tail, key=lambda step: abs(tail[step] - value)) if tail else 0
    compare = tail[at] if tail else start
    return Convergence(defense, objective, "plateau", steps, at, start, value, compare)


def fit_convergence(artifacts: Iterable[Any]) -> list[Convergence]:
    """The criteria stored in fitted artifacts' metadata (artifacts without one are skipped)."""
    found = []
    for artifact in artifacts:
        data = getattr(artifact, "metadata", {}).get(METADATA_KEY) or []
        found += [Convergence.from_json(d) for d in (data if isinstance(data, list) else [data])]
    return found


def worst(criteria: Iterable[Convergence]) -> Convergence | None:
    """The criterion furthest from being met (None when every one is met or there is none)."""
    missed = [c for c in criteria if not c.met]
    if not missed:
        return None
    return min(missed, key=_share_of_threshold)


def _share_of_threshold(c: Convergence) -> float:
    """How far a criterion is from its threshold, on one scale (1: at it; lower: further)."""
    if c.kind == "plateau":
        return 0.0 if math.isinf(c.measure) else FLAT / max(c.measure, 1e-12)
    return c.measure / REACHED
