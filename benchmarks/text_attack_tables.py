"""Tables of a finished text grid: per cell (state × defense × attack × batch) the mean ROUGE-1 and
ROUGE-2 over victim batches with 95 % t-intervals (one value per victim: the mean over its batch's
sequences, which share a gradient and are not independent), the share of sequences recovered exactly,
the reconstructions that are neither empty nor exact (*wrong*), the no-information guess's ROUGE-1
and the attack's seconds per victim; and, with ``--against``, each
attack's paired difference from that attack on the same victims.

    python benchmarks/text_attack_tables.py runs/text-batch-sweep
    python benchmarks/text_attack_tables.py runs/text-lamp-vs-tag --against tag --metric rouge2
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from leakshield.leaderboard.intervals import estimate


def read_cells(run: Path) -> list[dict]:
    """Every finished cell: its coordinates, metrics and per-sequence rows."""
    with sqlite3.connect(run / "results.sqlite") as db:
        rows = db.execute("SELECT key, status, metrics, victims FROM cells").fetchall()
    cells = []
    for key, status, metrics, victims in rows:
        if status != "ok":
            continue
        where = dict(part.split("=", 1) for part in key.split("|")[1:])
        cells.append({**where, "metrics": json.loads(metrics), "rows": json.loads(victims)})
    return cells


def per_victim(rows: list[dict], metric: str) -> dict[int, float]:
    """Victim index → the mean of ``metric`` over its batch's sequences."""
    grouped: dict[int, list[float]] = defaultdict(list)
    for row in rows:
        if row.get(metric) is not None:
            grouped[row["victim"]].append(row[metric])
    return {victim: statistics.fmean(values) for victim, values in grouped.items()}


def wrong(rows: list[dict]) -> str:
    """Reconstructed sequences that are neither empty nor exact, of all sequences: the false output."""
    bad = sum(1 for r in rows if r.get("reconstructed") and not r.get("exact"))
    return f"{bad} of {len(rows)}"


def _interval(values: list[float]) -> str:
    e = estimate(values)
    return f"{e.mean:.3f}" if e.half_width is None else f"{e.mean:.3f} [{e.low:.3f}, {e.high:.3f}]"


def table(cells: list[dict]) -> str:
    lines = [
        "| model | state | defense | attack | batch | ROUGE-1 | ROUGE-2 | exact | wrong | guess R-1 "
        "| s / victim | n |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        r1 = list(per_victim(c["rows"], "rouge1").values())
        r2 = list(per_victim(c["rows"], "rouge2").values())
        if not r1:
            continue
        m = c["metrics"]
        lines.append(
            f"| {c['model']} | {c['state']} | {c['defense']} | {c['attack']} | {c['batch']} | "
            f"{_interval(r1)} | {_interval(r2)} | {m.get('exact', 0):.2f} | {wrong(c['rows'])} | "
            f"{m.get('floor_rouge1', 0):.3f} | "
            f"{m['seconds_per_victim']:.2f} | {len(r1)} |"
        )
    return "\n".join(lines)


def differences(cells: list[dict], against: str, metric: str) -> str:
    """Each attack minus ``against`` on the same victims (state, defense, batch), paired per victim."""
    base = {(c["state"], c["defense"], c["batch"]): per_victim(c["rows"], metric) for c in cells
            if c["attack"] == against}  # fmt: skip
    lines = [f"| state | defense | batch | attack − {against} ({metric}) | n |", "|---|---|---|---|---|"]
    for c in cells:
        ref = base.get((c["state"], c["defense"], c["batch"]))
        if c["attack"] == against or ref is None:
            continue
        mine = per_victim(c["rows"], metric)
        paired = [mine[v] - ref[v] for v in sorted(set(mine) & set(ref))]
        if paired:
            lines.append(
                f"| {c['state']} | {c['defense']} | {c['batch']} | {c['attack']}: {_interval(paired)} | "
                f"{len(paired)} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a text grid's run directory")
    parser.add_argument("--against", help="print paired differences from this attack label")
    parser.add_argument("--metric", default="rouge2", help="the differences' metric (default rouge2)")
    args = parser.parse_args(argv)
    if not (args.run / "results.sqlite").is_file():
        print(f"{args.run}: no results.sqlite (run the grid first)", file=sys.stderr)
        return 2
    cells = read_cells(args.run)
    order = {"untrained": 0, "trained": 1}
    cells.sort(key=lambda c: (c["model"], order.get(c["state"], 2), c["defense"] != "none", c["defense"],
                              c["attack"], int(c["batch"])))  # fmt: skip
    print(table(cells))
    if args.against:
        print()
        print(differences(cells, args.against, args.metric))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
