"""The report's section on a client-side leakage filter (:mod:`leakshield.flower.leakage_filter`): each
decision a filtering client wrote to the run directory's ``leakage_filter.jsonl`` — the round, the
client, the leakage it measured on its own update, what it did, and the leakage of what it released."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

#: the file a filtering client appends its decisions to (one JSON object a line)
FILTER_LOG = "leakage_filter.jsonl"
HEADER = [
    "round",
    "client",
    "leak rate",
    "mean SSIM",
    "action",
    "released leak rate",
    "released SSIM",
    "seconds",
]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def filter_decisions(run_dir: Path) -> tuple[list[dict[str, Any]], int]:
    """The decisions of the latest run logged in ``run_dir``, by round and client, and how many lines
    were left out (earlier runs into the same folder; lines that are not a decision, such as one torn
    by a client killed while writing)."""
    path = run_dir / FILTER_LOG
    if not path.is_file():
        return [], 0
    found, skipped = [], 0
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            entry = None
        if isinstance(entry, dict):
            found.append(entry)
        else:
            skipped += 1
    runs = [r for r in (_number(d.get("run")) for d in found) if r is not None]
    latest = [d for d in found if not runs or _number(d.get("run")) == max(runs)]
    order = [((_number(d.get("round")) or -1), (_number(d.get("client")) or -1)) for d in latest]
    ranked = [d for _, d in sorted(zip(order, latest, strict=True), key=lambda pair: pair[0])]
    return ranked, skipped + len(found) - len(latest)


def _row(d: dict[str, Any]) -> list[str]:
    def number(part: str, key: str) -> str:
        block = d.get(part)
        value = _number(block.get(key)) if isinstance(block, dict) else None
        return "—" if value is None else f"{value:.3f}"

    seconds = _number(d.get("seconds"))
    return [str(d.get("round", "?")), str(d.get("client", "?")), number("measured", "leak_rate"),
            number("measured", "ssim"), str(d.get("action", "?")), number("released", "leak_rate"),
            number("released", "ssim"), "—" if seconds is None else f"{seconds:.2f}"]  # fmt: skip


def _summary(decisions: list[dict[str, Any]], skipped: int) -> str:
    acted = [d for d in decisions if d.get("action") not in ("sent", "sent unchecked")]
    clients = sorted({str(d.get("client")) for d in acted})
    seconds = sum(_number(d.get("seconds")) or 0.0 for d in decisions) / len(decisions)
    other = f" ({skipped} lines of earlier runs or unreadable left out)" if skipped else ""
    return (
        f"{len(decisions)} decisions{other}; the filter acted {len(acted)} times, on clients "
        f"{', '.join(clients) or 'none'}; "
        f"{seconds:.2f} s per decision on the client (its attack and, where it acted, the check again). "
        "A client's own leakage: the share of its batch reconstructed (SSIM at least the threshold and "
        "above the public mean image's) and the batch's mean SSIM."
    )


def filter_markdown(run_dir: Path) -> str:
    """The section in Markdown ("" when no client logged a decision)."""
    decisions, skipped = filter_decisions(run_dir)
    if not decisions:
        return ""
    rows = ["| " + " | ".join(_row(d)) + " |" for d in decisions]
    table = "\n".join(["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER), *rows])
    return f"\n## Client leakage filter\n\n{_summary(decisions, skipped)}\n\n{table}\n"


def filter_html(run_dir: Path) -> str:
    """The section in HTML ("" when no client logged a decision)."""
    decisions, skipped = filter_decisions(run_dir)
    if not decisions:
        return ""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADER)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in _row(d)) + "</tr>" for d in decisions
    )
    return (f"<h2>Client leakage filter</h2><p>{html.escape(_summary(decisions, skipped))}</p>"
            f"<table><tr>{head}</tr>{body}</table>")  # fmt: skip
