"""Defenses compared at equal cost: each defense at the rung that spends an accuracy budget, ranked.

A defense's **rungs** are its rows at other strengths (``strengths:`` in the leaderboard file, labelled
``<row>@<parameter>=<value>``; :mod:`.strengths`); the plain row is its paper-default rung. A rung's
**accuracy cost** is its accuracy below no defense, paired by utility seed: per seed, no defense's test
accuracy minus the rung's; the mean over seeds with a one-sided 95 % upper bound (Student's t, seeds − 1
degrees of freedom; one seed: the point alone, said in the table). A rung **fits** a budget of b points
when that upper bound is at most b/100, so a rung whose cost could exceed the budget does not fit it. The
bound reads the seeds' spread only: both accuracies come from the same test split, whose binomial error
largely cancels in the paired difference (not modelled). With 3 utility seeds (t 2.92) a cost must be
steady to fit 1 point.

Per budget (1, 2 and 5 points) and model, each defense contributes the fitting rung that trains and
*spends most of the budget* (the highest mean cost; ties: the label that sorts last — deterministic, not
a strength order) — chosen on utility alone, so the
test of its privacy against no defense is not run on the data that chose it (choosing the most private
fitting rung would be best-of-K again). The chosen rungs with no defense are ranked by the
second-version rule (:func:`.ordering.rank`: order by margin, each against no defense with Holm,
letters), so the positive control applies here too; a model whose control fails contributes nothing.
Systematic evaluations compare defenses at matched utility under the strongest
attack in the same way (arXiv 2402.09478).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from leakshield.experiment.store import CellRecord
from leakshield.leaderboard.ordering import REFERENCE, rank
from leakshield.leaderboard.outcomes import finite

#: the accuracy budgets, in points (percentage points of test accuracy) below no defense
BUDGETS = (1.0, 2.0, 5.0)
#: one-sided level of a cost's upper bound
COST_LEVEL = 0.95
#: what separates a row's label from its rung (``gaussian-noise@sigma=0.1``)
RUNG_MARK = "@"


def family(label: str) -> str:
    """The defense a row is a rung of: its label before ``@`` (``gaussian-noise@sigma=0.1`` →
    ``gaussian-noise``)."""
    return label.split(RUNG_MARK, 1)[0]


def rung_text(label: str) -> str:
    """``sigma=0.1`` for a rung, ``default`` for the plain row."""
    return label.split(RUNG_MARK, 1)[1] if RUNG_MARK in label else "default"


@dataclass(frozen=True)
class Cost:
    """A rung's accuracy below no defense over the utility seeds both ran: mean, one-sided upper bound
    (None from one seed) and the seeds."""

    mean: float
    upper: float | None
    seeds: int

    def bound(self) -> float:
        """What a budget is compared with: the upper bound, the mean from one seed."""
        return self.mean if self.upper is None else self.upper

    def text(self) -> str:
        """``+1.5 pts (≤ 2.1, 3 seeds)``: what a budget is compared with (the bound; from one seed, the
        mean) rounded up to a tenth of a point, so a rung left out of a budget never prints a figure within
        it; minus signs as the tables write them."""
        if self.upper is None:
            return f"{_tenth_up(self.mean):+.1f} pts (1 seed, no bound)".replace("-", "−")
        points = f"{100 * self.mean:+.1f}"
        return f"{points} pts (≤ {_tenth_up(self.upper):.1f}, {self.seeds} seeds)".replace("-", "−")


def _tenth_up(fraction: float) -> float:
    """A fraction of accuracy in points, rounded up to a tenth (float noise within :func:`fits`'s 1e-12
    tolerance rounds down, as it fits); never −0.0."""
    return math.ceil(1000 * fraction - 1e-9) / 10 + 0.0


def accuracy_costs(records: Sequence[CellRecord]) -> dict[tuple[str, str], Cost]:
    """(model, defense) → its accuracy cost, paired with no defense by utility seed."""
    from scipy.stats import t

    accuracy: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    for r in records:
        value = finite(r.metrics.get("accuracy"))
        if r.kind == "utility" and r.status == "ok" and r.model and r.defense and value is not None:
            accuracy[(r.model, r.defense)][int(r.seed or 0)] = value
    out = {}
    for (model, defense), mine in accuracy.items():
        clean = accuracy.get((model, REFERENCE), {})
        costs = [clean[s] - a for s, a in sorted(mine.items()) if s in clean]
        if not costs:
            continue
        n, mean = len(costs), sum(costs) / len(costs)
        upper = None
        if n > 1:
            sd = math.sqrt(sum((c - mean) ** 2 for c in costs) / (n - 1))
            upper = mean + float(t.ppf(COST_LEVEL, n - 1)) * sd / math.sqrt(n)
        out[(model, defense)] = Cost(mean, upper, n)
    return out


def fits(cost: Cost | None, budget: float) -> bool:
    """Whether a rung with ``cost`` fits ``budget`` points (its upper bound at most the budget)."""
    return cost is not None and cost.bound() <= budget / 100 + 1e-12


@dataclass(frozen=True)
class BudgetChoice:
    """One budget's answer for one table: the chosen rungs ranked, each defense with no fitting rung,
    each rung whose mean fits but whose bound does not, each defense no budget can compare (no accuracy:
    a guard; no attack score; or no rung that trains), and each model whose positive control failed."""

    budget: float
    rows: list[Any]
    none_fit: tuple[str, ...]
    uncertain: tuple[str, ...]
    outside: tuple[str, ...] = ()
    unranked_models: tuple[str, ...] = ()


def within_budget(rows: Sequence[Any], costs: dict[tuple[str, str], Cost], budget: float) -> BudgetChoice:
    """The fitting rung of each defense in ``rows`` (one threat's :class:`~.ranking.Standing` rows) that
    spends most of ``budget`` points, ranked with no defense (models whose positive control failed left
    out)."""
    chosen, missing, uncertain, outside = [], [], [], []
    groups: dict[tuple[str, str], list[Any]] = defaultdict(list)
    failed = sorted({r.model for r in rows if r.control is not None and not r.control.passes})
    for row in rows:
        if row.model not in failed:
            groups[(row.model, family(row.defense))].append(row)
    for (model, name), rungs in sorted(groups.items()):
        usable = [r for r in rungs if r.strongest is not None and r.trains and r.accuracy is not None]
        if not usable:
            outside.append(name)
            continue
        fitting = [r for r in usable if fits(costs.get((model, r.defense)), budget)]
        uncertain += [r.defense for r in usable if r not in fitting and (c := costs.get((model, r.defense)))
                      is not None and c.mean <= budget / 100]  # fmt: skip
        if not fitting:
            if name != REFERENCE:
                missing.append(name)
            continue
        chosen.append(max(fitting, key=lambda r: (costs[(model, r.defense)].mean, r.defense)))
    return BudgetChoice(budget, rank(chosen), tuple(missing), tuple(uncertain), tuple(outside), tuple(failed))
