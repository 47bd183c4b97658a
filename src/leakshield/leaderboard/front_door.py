"""The README's compact Results: per threat model, the top rows of defenses that train, the undefended
row, the no-information level and the defenses that do not train at the run's budget — a screen, not
the whole leaderboard (every table with every column is on the results page beside the export)."""

from __future__ import annotations

from collections.abc import Sequence

from leakshield.leaderboard.budget_tables import TITLE as BUDGET_TITLE
from leakshield.leaderboard.tables import DOES_NOT_TRAIN, REFUSES_HONEST, STALE_MARK, Table
from leakshield.leaderboard.text_section import text_header

#: rows of defenses that train shown per threat model, besides the undefended one
TOP = 3
#: the columns the compact tables keep, in this order (the rest are on the results page)
KEPT = (
    "rank · letters",
    "model · defense",
    "strongest attack (round) · victims",
    "margin ↓ (95 % CI)",
    "vs no defense (simultaneous CI)",
    "leaked victims (95 % CI)",
    "accuracy (95 % CI)",
    "front",
)


def _parts(label: str) -> tuple[str, str]:
    """(model, defense) of a ``model · defense`` row label (a stale mark dropped)."""
    model, _, defense = label.removesuffix(STALE_MARK).rpartition(" · ")
    return model, defense


def compact_table(table: Table, page: str) -> str:
    """``table`` cut to :data:`KEPT` columns and its top rows (Markdown): the most private ranked rows
    known to train (the ranking has gated out those below the floor; a row without an accuracy is not
    claimed to train) and the undefended rows; then a
    line naming the rows that do not train and how many rows the results ``page`` has beyond those
    shown ("" for a table that ranks nothing)."""
    if KEPT[0] not in table.header or "model · defense" not in table.header or not table.rows:
        return ""
    columns = [name if name in table.header else text_header(name) for name in KEPT]  # or the text's
    at = {name: table.header.index(name) for name in columns if name in table.header}
    label, rank, accuracy = at["model · defense"], at[KEPT[0]], at.get("accuracy (95 % CI)")

    undefended = [row for row in table.rows if _parts(row[label])[1] == "none"]
    failing = [row for row in table.rows if row[rank] in (DOES_NOT_TRAIN, REFUSES_HONEST)]
    known = (
        (lambda row: row[accuracy].strip() not in ("", "—")) if accuracy is not None else (lambda row: False)
    )
    ranked = [row for row in table.rows if row[rank].split(" · ")[0].isdigit()]
    top = [row for row in ranked if known(row) and row not in undefended][:TOP]
    shown = [row for row in table.rows if row in top or row in undefended]
    lines = [
        f"### {table.title}",
        "",
        "| " + " | ".join(at) + " |",
        "|" + "---|" * len(at),
        *("| " + " | ".join(row[i].replace("|", "\\|") for i in at.values()) + " |" for row in shown),
        "",
    ]
    words = []
    if failing:
        named = ", ".join(
            f"{row[label]} (accuracy {row[accuracy]})" if accuracy is not None else row[label]
            for row in failing
        )
        share = "accuracy under chance + ½ (undefended − chance), or a guard refusing most honest models"
        words.append(f"Does not pass the utility gate ({share}; not compared): {named}.")
    rest = len(table.rows) - len(shown)
    if rest:
        letters = {row[rank].split(" · ")[-1] for row in shown if row in ranked}
        shared = sum(bool(set(row[rank].split(" · ")[-1]) & set("".join(letters)))
                     for row in ranked if row not in shown)  # fmt: skip
        also = f" ({shared} sharing a letter with a row shown)" if shared else ""
        words.append(f"{rest} more row{'s' * (rest > 1)} on the [results page]({page}){also}.")
    return "\n".join(lines) + ("\n" + " ".join(words) + "\n" if words else "")


#: the accuracy budget the README answers for (the results page has every budget)
README_BUDGET = 2.0
#: the columns of the README's budget summary, from the matched-utility tables
BUDGET_KEPT = ("model · defense", "rung", "vs no defense (simultaneous CI)", "leaked victims (95 % CI)",
               "accuracy cost")  # fmt: skip


def _place(rank: str) -> int | None:
    """The place of a ``3 · ab`` rank (None for a gate's verdict)."""
    head = rank.split(" · ")[0]
    return int(head) if head.isdigit() else None


def budget_summary(tables: Sequence[Table], page: str, budget: float = README_BUDGET) -> str:
    """Per threat model, the most private defense whose accuracy cost fits ``budget`` points: the first
    defended row of that budget in the matched-utility tables (:mod:`.budget_tables`), with its difference
    from no defense and its cost, and how many other defenses of that budget share its letter; "" when
    none ranks."""
    label = f"≤ {budget:g} pts"
    lines = []
    for table in tables:
        if not table.title.startswith(BUDGET_TITLE) or any(n not in table.header for n in BUDGET_KEPT):
            continue
        at = {name: table.header.index(name) for name in ("budget", "rank · letters", *BUDGET_KEPT)}
        rank = at["rank · letters"]
        rows = [r for r in table.rows if r[at["budget"]] == label and _place(r[rank])]
        defended = [r for r in rows if _parts(r[at["model · defense"]])[1] != "none"]
        if not defended:
            continue
        best = min(defended, key=lambda r: _place(r[rank]) or 0)
        letters = set(best[rank].split(" · ")[-1])
        shared = sum(bool(set(r[rank].split(" · ")[-1]) & letters) for r in defended if r is not best)
        threat = table.title.split(": ", 1)[-1].split(" (catalogue")[0]
        threat = threat[:1].upper() + threat[1:]
        cells = [threat, *(best[at[name]].replace("|", "\\|") for name in BUDGET_KEPT), str(shared)]
        versus = 1 + BUDGET_KEPT.index("vs no defense (simultaneous CI)")
        if not cells[versus].endswith("*"):  # the least leaky within the budget, yet not shown below none
            cells[versus] += " (not shown to leak less)"
        lines.append("| " + " | ".join(cells) + " |")
    if not lines:
        return ""
    head = ["adversary", "most private within the budget", "rung", "vs no defense (simultaneous CI)",
            "leaked victims (95 % CI)", "accuracy cost", "rows not shown different"]  # fmt: skip
    intro = (
        f"### Within {budget:g} points of accuracy\n\n"
        f"Per adversary, the defense that leaks least among those whose accuracy cost (no defense's "
        f"accuracy minus its own, paired by seed) has a one-sided 95 % upper bound within {budget:g} points, "
        f"each at the rung that spends most of it; the last column counts the other defenses within it "
        f"that share its letter (not shown different). Every budget (1, 2, 5 points) and every row: the "
        f"[results page]({page})."
    )
    return "\n".join([intro, "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head), *lines, ""])


def compact_results(
    tables: Sequence[Table], baseline: float | None, page: str, text: Sequence[Table] = ()
) -> str:
    """The README's tables: one compact table per ranked threat model and the most private defense within
    :data:`README_BUDGET` points per threat (realism and accuracy-budget tables are on the ``page``
    only), after one line on how to read them; then the ``text`` section's, after its own line."""
    level = "" if baseline is None else f", {baseline:.3f} here for the public mean image"
    intro = (
        "Per threat model: the most private defenses that train, listed by the margin of the strongest "
        "attack that adversary ran — per victim, how far the reconstruction's SSIM rises above the "
        f"victim's own no-information score{level}, 0 at or below it — and the undefended row. Each "
        "row's difference from no defense is paired by seed, with a simultaneous interval (* : shown to "
        "leak less, Holm-corrected); rows sharing a letter were not shown different. Accuracy after "
        f"FedAvg under the defense; ● the privacy–utility front. How to read them, every row and column, "
        f"and the realism scenarios: the [results page]({page})."
    )
    parts = [compact_table(t, page) for t in tables if not t.title.startswith(BUDGET_TITLE)]
    parts.append(budget_summary(tables, page))  # the budget tables themselves are on the page only
    out = intro + "\n\n" + "\n".join(p for p in parts if p)
    found = [p for p in (compact_table(t, page) for t in text) if p]
    if not found:
        return out
    reading = (
        "The text section, under the same rule: the unit is one text, its margin the reconstruction's "
        "ROUGE-2 above that of its own no-information guess (the public split's most frequent words at "
        "its length), leaked at ROUGE-2 ≥ 0.6; accuracy on the test texts after FL training under the "
        "defense. The model, the "
        f"federation and every column: the [results page]({page})."
    )
    return out + "\n### Text: federated language models\n\n" + reading + "\n\n" + "\n".join(found)
