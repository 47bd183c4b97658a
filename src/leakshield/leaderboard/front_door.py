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


def compact_results(
    tables: Sequence[Table], baseline: float | None, page: str, text: Sequence[Table] = ()
) -> str:
    """The README's tables: one compact table per ranked threat model (realism and accuracy-budget tables
    are on the ``page`` only), after one line on how to read them; then the ``text`` section's, after its
    own line."""
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
    parts = [compact_table(t, page) for t in tables if not t.title.startswith(BUDGET_TITLE)]  # page only
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
