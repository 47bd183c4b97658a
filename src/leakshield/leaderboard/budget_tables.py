"""The matched-utility tables: per threat model, each defense at the rung that spends most of a budget of
1, 2 or 5 points of accuracy below no defense, ranked by the second-version rule (:mod:`.budgets`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from leakshield.experiment.store import CellRecord
from leakshield.leaderboard.budgets import BUDGETS, accuracy_costs, rung_text, within_budget
from leakshield.leaderboard.tables import (
    Table,
    accuracy_text,
    leak_text,
    margin_text,
    rank_text,
    ranked_records,
    threat_rankings,
    versus_text,
)

#: the title's start (the report lists these tables beside the rankings)
TITLE = "Most private within an accuracy budget"


def _points(budget: float) -> str:
    return f"{budget:g} point" + ("" if budget == 1 else "s")


def _note(missing: dict[float, tuple[str, ...]], uncertain: dict[float, tuple[str, ...]], seeds: int) -> str:
    parts = [
        "Each defense at the rung (strength) that spends most of the budget — chosen on accuracy alone — "
        "among those whose accuracy cost — no defense's test accuracy minus the rung's, paired by utility "
        "seed — has a one-sided 95 % upper bound within the budget "
        f"({'one utility seed: the point alone, no bound' if seeds < 2 else f'{seeds} utility seeds, t'}); "
        "ranked as the table above (mean margin of the strongest attack; vs no defense: paired over seeds, "
        "Holm; letters: all pairs). A rung is the row's label after @ (default: the paper's strength)."
    ]
    for budget in sorted(missing):
        if missing[budget]:
            parts.append(f"No rung fits {_points(budget)}: {', '.join(missing[budget])}.")
        if uncertain.get(budget):
            parts.append(f"Mean within {_points(budget)} but not its bound: {', '.join(uncertain[budget])}.")
    return " ".join(parts)


def budget_table(
    threat: str, rows: Sequence, records: Sequence[CellRecord], budgets: Sequence[float] = BUDGETS
) -> Table | None:
    """One threat's matched-utility table (None where no row has an accuracy cost, or where every model's
    positive control failed: nothing ranks at any budget)."""
    costs = accuracy_costs(records)
    if not costs or all(r.control is not None and not r.control.passes for r in rows):
        return None
    header = ["budget", "rank · letters", "model · defense", "rung", "strongest attack", "margin ↓ (95 % CI)",
              "vs no defense (simultaneous CI)", "leaked victims (95 % CI)", "accuracy cost",
              "accuracy (95 % CI)"]  # fmt: skip
    body, missing, uncertain, outside, failed = [], {}, {}, (), ()
    for budget in budgets:
        choice = within_budget(rows, costs, budget)
        missing[budget], uncertain[budget], outside = choice.none_fit, choice.uncertain, choice.outside
        failed = choice.unranked_models
        for row in choice.rows:
            cost = costs.get((row.model, row.defense))
            body.append([
                f"≤ {budget:g} pts", rank_text(row), f"{row.model} · {row.defense}",
                rung_text(row.defense),
                row.strongest.where if row.strongest else "—", margin_text(row.strongest), versus_text(row),
                leak_text(row.strongest), "—" if cost is None else cost.text(), accuracy_text(row),
            ])  # fmt: skip
    seeds = max((c.seeds for c in costs.values()), default=0)
    title = f"{TITLE}: {threat}"
    note = _note(missing, uncertain, seeds)
    if outside:
        note += (f" Not comparable at any budget (no accuracy, no attack score, or no rung that trains): "
                 f"{', '.join(outside)}.")  # fmt: skip
    if failed:
        note += f" Left out: {', '.join(failed)} (the strongest attack does not leak its no-defense row)."
    return Table(title, header, body, note)


def budget_tables(
    records: Sequence[CellRecord], ranked: Sequence[CellRecord] = ()
) -> Iterator[tuple[str, Table]]:
    """(threat, its matched-utility table) for every threat whose table ranks and has accuracy costs."""
    everything = ranked_records(records, ranked)
    for threat, rows, _, _, _ in threat_rankings(everything):
        table = budget_table(threat, rows, everything)
        if table is not None:
            yield threat, table
