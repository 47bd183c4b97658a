"""HTML pieces of the audit's report: escaped text, tables (a threat's rows, the budget's ranking, the
membership section) and the words of a score."""

from __future__ import annotations

import html

from leakshield.leaderboard.budgets import BudgetChoice
from leakshield.leaderboard.margin import bounded_mean
from leakshield.leaderboard.ranking import AttackScore, Standing
from leakshield.leaderboard.tables import accuracy_text, leak_text
from leakshield.membership.section import THREATS, table_rows
from leakshield.membership.section import Standing as MembershipStanding


def escape(text: object) -> str:
    return html.escape(str(text))


def table(header: list[str], body: list[list[str]]) -> str:
    """A table of ``body``'s cells (already HTML) under ``header`` (text)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    rows = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in body)
    return f"<table><tr>{head}</tr>{rows}</table>"


def membership_html(found: dict[str, tuple[list[MembershipStanding], bool]] | None, fpr: float = 0.01) -> str:
    """The membership section: per threat, each row's strongest attack and its TPR at ``fpr`` over seeds
    (``found``: the game's ranked tables; None: left out)."""
    if found is None:
        return "<h2>Membership inference</h2><p>Left out (membership.run: false).</p>"
    parts = [
        "<h2>Membership inference</h2><p>Would the server learn who was in a client's data? Each client's "
        "records are split at random into members (trained on) and non-members; the strongest of FedMIA, "
        "the loss threshold and the gradient attacks is chosen on half the clients and measured on the "
        f"other half. TPR at {fpr * 100:g} % FPR over seeds (chance: {fpr:g}). ROC curves: "
        "<code>membership/membership.html</code>.</p>"
    ]
    for threat, (rows, control) in found.items():
        head, cells = table_rows(rows, fpr, control)
        parts.append(f"<h3>{escape(THREATS[threat][0])}</h3>")
        parts.append(table(head, [[escape(c) for c in row] for row in cells]))
    return "".join(parts)


def score_text(score: AttackScore) -> str:
    """The mean SSIM over seeds with its 95 % interval inside [0, 1] (``0.412 [0.332, 0.492]``)."""
    if not score.outcomes:
        return f"{score.ssim:.3f}"
    return bounded_mean([o.score for o in score.outcomes]).text()


def versus_text(row: Standing) -> str:
    """The row's difference from no defense, or why it has none."""
    if row.versus_none is not None:
        return row.versus_none.text()
    if row.defense == "none":
        return "reference"
    return "not compared: does not train" if not row.trains else "not compared"


def rows_table(rows: list[Standing]) -> str:
    """Every row of a threat table: strongest attack, score, leaks, difference, letters, accuracy."""
    body = []
    for r in rows:
        best = r.strongest
        body.append(
            [
                escape(r.defense) + ("" if r.trains else " (does not train)"),
                escape(best.where if best else "none succeeded"),
                escape(score_text(best)) if best else "",
                escape(leak_text(best)),
                escape(versus_text(r)),
                escape(r.letters),
                escape(accuracy_text(r)),
            ]
        )
    return table(
        [
            "defense",
            "strongest attack",
            "SSIM (95 %)",
            "leaked victims",
            "margin − no defense",
            "letters",
            "accuracy (95 %)",
        ],
        body,
    )


def budget_table(choice: BudgetChoice, points: float, costs_text: dict[str, str]) -> str:
    """The defenses at the rung that spends ``points`` of accuracy, ranked (``costs_text``: defense →
    its cost in words)."""
    if choice.unranked_models:
        return (
            "<p>Not ranked: the positive control failed — with no defense the strongest attack does not "
            "leak measurably above the no-information guess, so no defense can be shown to leak less.</p>"
        )
    if not choice.rows:
        return "<p>No defense row could be ranked at this budget (no accuracy measured, or none trains).</p>"
    body = [
        [
            escape(r.defense),
            escape(costs_text.get(r.defense, "n/a")),
            escape(versus_text(r)),
            escape(r.letters),
        ]
        for r in choice.rows
    ]
    notes = []
    if choice.none_fit:
        notes.append(f"no rung fits {points:g} points: {', '.join(choice.none_fit)}")
    if choice.uncertain:
        notes.append(f"mean cost fits but its upper bound does not: {', '.join(choice.uncertain)}")
    if choice.outside:
        notes.append(
            f"not comparable (no accuracy, no attack score or no rung that trains): "
            f"{', '.join(choice.outside)}"
        )
    extra = "".join(f"<li>{escape(n)}</li>" for n in notes)
    return table(
        [
            "defense at the rung that spends the budget",
            "accuracy cost",
            "margin − no defense (* leaks less)",
            "letters",
        ],
        body,
    ) + (f"<ul>{extra}</ul>" if extra else "")
