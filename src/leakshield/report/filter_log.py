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


def filter_decisions(run_dir: Path) -> list[dict[str, Any]]:
    """The decisions logged in ``run_dir`` (a torn last line, from a client killed while writing, is
    skipped), by round and client."""
    path = run_dir / FILTER_LOG
    if not path.is_file():
        return []
    found = []
    for line in path.read_text().splitlines():
        try:
            found.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return sorted(found, key=lambda d: (d.get("round", 0), d.get("client", 0)))


def _row(d: dict[str, Any]) -> list[str]:
    def number(part: str, key: str) -> str:
        value = (d.get(part) or {}).get(key)
        return "—" if value is None else f"{value:.3f}"

    return [str(d.get("round", "?")), str(d.get("client", "?")), number("measured", "leak_rate"),
            number("measured", "ssim"), str(d.get("action", "?")), number("released", "leak_rate"),
            number("released", "ssim"), f"{d.get('seconds', 0):.2f}"]  # fmt: skip


def _summary(decisions: list[dict[str, Any]]) -> str:
    acted = [d for d in decisions if d.get("action") not in ("sent", "sent unchecked")]
    clients = sorted({d.get("client") for d in acted})
    seconds = sum(d.get("seconds", 0) for d in decisions) / len(decisions)
    return (
        f"{len(decisions)} decisions; the filter acted {len(acted)} times, on clients {clients or 'none'}; "
        f"{seconds:.2f} s per decision on the client (its attack and, where it acted, the check again). "
        "A client's own leakage: the share of its batch reconstructed (SSIM at least the threshold and "
        "above the public mean image's) and the batch's mean SSIM."
    )


def filter_markdown(run_dir: Path) -> str:
    decisions = filter_decisions(run_dir)
    if not decisions:
        return ""
    rows = ["| " + " | ".join(_row(d)) + " |" for d in decisions]
    table = "\n".join(["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER), *rows])
    return f"\n## Client leakage filter\n\n{_summary(decisions)}\n\n{table}\n"


def filter_html(run_dir: Path) -> str:
    decisions = filter_decisions(run_dir)
    if not decisions:
        return ""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADER)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in _row(d)) + "</tr>" for d in decisions
    )
    return (f"<h2>Client leakage filter</h2><p>{html.escape(_summary(decisions))}</p>"
            f"<table><tr>{head}</tr>{body}</table>")  # fmt: skip
