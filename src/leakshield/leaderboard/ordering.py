"""A threat table's order and comparisons: rows listed by their strongest attack's mean margin, each
compared with no defense of its model (one-sided paired t over seeds, Holm; :mod:`.comparisons`), letters
from all-pairs tests, and the privacy–utility front.

Only rows that pass the utility gate and have an attack score are compared; the others follow, unranked.
A model whose no-defense row fails the positive control (:mod:`.controls`: its strongest attack does not
leak it measurably) ranks nothing: its rows are listed unranked, off the front, each carrying the control.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from leakshield.leaderboard.comparisons import (
    ALPHA_PAIRS,
    ALPHA_VERSUS_NONE,
    letter_display,
    pairwise_different,
    versus_reference,
)
from leakshield.leaderboard.controls import control
from leakshield.leaderboard.intervals import level

#: a :class:`leakshield.leaderboard.ranking.Standing` (not imported: ranking calls this module)
Standing = Any

#: the row every other row is compared with
REFERENCE = "none"


def privacy(row: Standing) -> tuple[float, float]:
    """Lower is more private: (mean margin, leak rate) of the row's strongest attack (a score without
    per-seed outcomes: its SSIM, leak rate 1)."""
    assert row.strongest is not None
    margin = row.strongest.margin
    rate = row.strongest.leak.rate if row.strongest.outcomes else 1.0
    return (level(margin.mean) if margin is not None else level(row.strongest.ssim), round(rate, 6))


def dominates(a: Standing, b: Standing) -> bool:
    """``a`` is at least as private and as accurate as ``b``, better in one."""
    if a.strongest is None or b.strongest is None or a.accuracy is None or b.accuracy is None:
        return False
    pa, pb = privacy(a), privacy(b)
    return pa <= pb and a.accuracy >= b.accuracy and (pa < pb or a.accuracy > b.accuracy)


def mark_pareto(rows: list[Standing]) -> list[Standing]:
    """Mark the rows no other row of the same model dominates (identical points are both on the front);
    rows without a strongest attack or an accuracy, and rows that do not train, are off the front."""
    placed = [r for r in rows if r.strongest is not None and r.accuracy is not None and r.trains]
    out = []
    for row in rows:
        beaten = any(dominates(o, row) for o in placed if o is not row and o.model == row.model)
        out.append(dataclasses.replace(row, pareto=row in placed and not beaten))
    return out


def rank(
    rows: list[Standing], alpha: float = ALPHA_VERSUS_NONE, alpha_pairs: float = ALPHA_PAIRS
) -> list[Standing]:
    """Per model: the compared rows by (mean margin, leak rate, accuracy, name), each with its place, its
    difference from no defense (Holm over the rows compared with it) and its letters (all pairs, Holm);
    then the rows that do not pass the gate and those without an attack score, unranked. A row is
    compared only with rows of its own stage (stage 2's victims differ from stage 1's: no pairing by
    seed), so a row whose rerun is missing has no difference from a no-defense row that has one."""

    def key(row: Standing) -> tuple:
        return (*privacy(row), -(row.accuracy if row.accuracy is not None else -1.0), row.defense)

    out: list[Standing] = []
    for model in sorted({r.model for r in rows}):
        mine = [r for r in rows if r.model == model]
        undefended = next((r for r in mine if r.defense == REFERENCE and r.strongest is not None), None)
        check = control(undefended, alpha) if undefended is not None else None
        mine = [dataclasses.replace(r, control=check) for r in mine]
        if check is not None and not check.passes:  # the attack does not leak no defense: nothing ranks
            out += sorted((dataclasses.replace(r, pareto=False) for r in mine if r.strongest is not None),
                          key=key)  # fmt: skip
            out += [r for r in mine if r.strongest is None]
            continue
        ranked = sorted((r for r in mine if r.strongest is not None and r.trains), key=key)
        margins = [r.strongest.margins for r in ranked]  # type: ignore[union-attr]
        stages = [r.stage_two for r in ranked]  # rows are paired by seed only on the same victims
        reference = next((i for i, r in enumerate(ranked) if r.defense == REFERENCE), None)
        differences = {}
        if reference is not None:
            others = [i for i in range(len(ranked)) if i != reference and stages[i] == stages[reference]]
            found = versus_reference([margins[i] for i in others], margins[reference], alpha)
            differences = dict(zip(others, found, strict=True))
        letters = letter_display(len(ranked), pairwise_different(margins, alpha_pairs, stages))
        out += [dataclasses.replace(r, rank=i + 1, versus_none=differences.get(i), letters=letters[i])
                for i, r in enumerate(ranked)]  # fmt: skip
        out += sorted((r for r in mine if r.strongest is not None and not r.trains), key=key)
        out += [r for r in mine if r.strongest is None]
    return out
