"""The README's compact Results: per threat model, the top rows of defenses that train, the undefended
row, the no-information level and the defenses that do not train at the run's budget — a screen, not
the whole leaderboard (every table with every column is on the results page beside the export)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from leakshield.leaderboard.tables import STALE_MARK, Table

#: rows of defenses that train shown per threat model, besides the undefended one
TOP = 3
#: the columns the compact tables keep, in this order (the rest are on the results page)
KEPT = (
    "rank",
    "model · defense",
    "strongest attack (round)",
    "SSIM ↓ (95 % CI)",
    "accuracy (95 % CI)",
    "front",
)
#: a defense "does not train at this budget" below this share of the undefended model's accuracy
TRAINS_SHARE = 0.5
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _mean(text: str) -> float | None:
    found = _NUMBER.match(text.strip())
    return float(found.group()) if found else None


def _parts(label: str) -> tuple[str, str]:
    """(model, defense) of a ``model · defense`` row label (a stale mark dropped)."""
    model, _, defense = label.removesuffix(STALE_MARK).rpartition(" · ")
    return model, defense


def compact_table(table: Table, page: str) -> str:
    """``table`` cut to :data:`KEPT` columns and its top rows (Markdown): the most private rows whose
    accuracy is known and at least :data:`TRAINS_SHARE` of their model's undefended accuracy, and the
    undefended rows; then a line naming the rows below that share and how many rows the results
    ``page`` has beyond those shown ("" for a table that ranks nothing)."""
    if "rank" not in table.header or "model · defense" not in table.header or not table.rows:
        return ""
    at = {name: table.header.index(name) for name in KEPT if name in table.header}
    label, rank, accuracy = at["model · defense"], at["rank"], at.get("accuracy (95 % CI)")

    def value(row: list[str]) -> float | None:
        return None if accuracy is None else _mean(row[accuracy])

    undefended = [row for row in table.rows if _parts(row[label])[1] == "none"]
    reference = {_parts(row[label])[0]: value(row) for row in undefended}

    def floor(row: list[str]) -> float | None:
        known = reference.get(_parts(row[label])[0])
        return None if known is None else TRAINS_SHARE * known

    def trains(row: list[str]) -> bool:  # known to train: an accuracy at or above its model's floor
        v, f = value(row), floor(row)
        return v is not None and (f is None or v >= f)

    failing = [row for row in table.rows if value(row) is not None and floor(row) is not None
               and not trains(row)]  # fmt: skip
    top = [row for row in table.rows if trains(row) and row not in undefended][:TOP]
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
            f"{row[label]} (rank {row[rank]}, accuracy {row[accuracy]})"  # type: ignore[index]
            for row in failing
        )
        share = f"accuracy under {TRAINS_SHARE:g} × its model's undefended accuracy"
        words.append(f"Does not train at this budget ({share}): {named}.")
    rest = len(table.rows) - len(shown)
    if rest:
        last = top[-1][rank] if top else None
        tied = sum(row[rank] == last for row in table.rows if row not in shown)
        also = f" ({tied} tied at rank {last})" if tied else ""
        words.append(f"{rest} more row{'s' * (rest > 1)} on the [results page]({page}){also}.")
    return "\n".join(lines) + ("\n" + " ".join(words) + "\n" if words else "")


def compact_results(tables: Sequence[Table], baseline: float | None, page: str) -> str:
    """The README's tables: one compact table per ranked threat model (realism tables are on the
    ``page`` only), after one line on how to read them."""
    level = "" if baseline is None else f", {baseline:.3f} here for the public mean image"
    intro = (
        "Per threat model: the most private defenses that train, ranked by the SSIM of the strongest "
        f"attack that adversary ran (lower is more private; at the no-information level{level}, a row "
        'reads "no measurable leakage"), and the undefended row; accuracy after FedAvg under the defense; '
        f"● the privacy–utility front. How to read them, every row and column, and the realism "
        f"scenarios: the [results page]({page})."
    )
    parts = [compact_table(t, page) for t in tables]
    return intro + "\n\n" + "\n".join(p for p in parts if p)
