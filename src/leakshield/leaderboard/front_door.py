"""The README's compact Results: per threat model, the top rows of defenses that train, the undefended
row, the no-information level and the defenses that do not train at the run's budget — a screen, not
the whole leaderboard (every table with every column is on the results page beside the export)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from leakshield.leaderboard.tables import Table

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


def _defense(label: str) -> str:
    return label.split(" · ", 1)[-1].removesuffix(" (stale)")


def compact_table(table: Table, page: str) -> str:
    """``table`` cut to :data:`KEPT` columns and its top rows (Markdown), with a line naming the
    defenses that do not train and how many rows the results ``page`` has."""
    if "rank" not in table.header:
        return ""
    at = {name: table.header.index(name) for name in KEPT if name in table.header}
    label, accuracy = at["model · defense"], at.get("accuracy (95 % CI)")
    undefended = [row for row in table.rows if _defense(row[label]) == "none"]
    reference = _mean(undefended[0][accuracy]) if undefended and accuracy is not None else None
    floor = None if reference is None else TRAINS_SHARE * reference

    def trains(row: list[str]) -> bool:
        value = None if accuracy is None else _mean(row[accuracy])
        return floor is None or value is None or value >= floor

    top = [row for row in table.rows if trains(row) and _defense(row[label]) != "none"][:TOP]
    shown = [row for row in table.rows if row in top or row in undefended]
    lines = [
        f"### {table.title}",
        "",
        "| " + " | ".join(at) + " |",
        "|" + "---|" * len(at),
        *("| " + " | ".join(row[i].replace("|", "\\|") for i in at.values()) + " |" for row in shown),
        "",
    ]
    failing = [row for row in table.rows if not trains(row)]
    rest = len(table.rows) - len(shown)
    words = f"{rest} more row{'s' * (rest > 1)} on the [results page]({page})." if rest else ""
    if failing and floor is not None:
        named = ", ".join(
            f"{_defense(row[label])} (rank {row[at['rank']]}, accuracy {row[accuracy]})"  # type: ignore[index]
            for row in failing
        )
        words = (
            f"Does not train at this budget (accuracy under {TRAINS_SHARE:g} × the undefended "
            f"{reference:.3f}): {named}. " + words
        )
    return "\n".join(lines) + (f"\n{words}\n" if words else "")


def compact_results(tables: Sequence[Table], baseline: float | None, page: str) -> str:
    """The README's tables: one compact table per ranked threat model (realism tables are on the
    ``page`` only), after one line on how to read them."""
    level = "—" if baseline is None else f"{baseline:.3f}"
    intro = (
        "Per threat model: the most private defenses that train, ranked by the SSIM of the strongest "
        f"attack that adversary ran (lower is more private; at the no-information level, {level} for the "
        'public mean image, a row reads "no measurable leakage"), and the undefended row; accuracy after '
        f"FedAvg under the defense; ● the privacy–utility front. How to read them, every row and column, "
        f"and the realism scenarios: the [results page]({page})."
    )
    parts = [compact_table(t, page) for t in tables]
    return intro + "\n\n" + "\n".join(p for p in parts if p)
