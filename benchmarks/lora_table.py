"""Full fine-tuning against LoRA at each rank, from a finished ``benchmarks/text_lora.yaml`` run: per
model, state and attack the seeds' mean with its 95 % t-interval, and each LoRA rank's paired difference from
full fine-tuning per seed (``leakshield.leaderboard.comparisons.difference``, two-sided at 95 %).

    leakshield run benchmarks/text_lora.yaml --corpus FILE --out runs/text-lora
    python benchmarks/lora_table.py runs/text-lora

Columns: DAGER's exact share (a review back token for token), TAG's ROUGE-1 and the share of TAG's
reconstructions above their own no-information guess's ROUGE-1, the bag of words' recall, and the test
accuracy after the FedAvg rounds (the state "trained"; "untrained" is the pretrained model, round 0).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from collections import defaultdict
from pathlib import Path

from leakshield.leaderboard.comparisons import difference
from leakshield.leaderboard.intervals import estimate


def cells(folder: Path) -> dict[tuple[str, str, str], dict[int, dict]]:
    """(model, state, attack) → seed → the cell's metrics and per-victim rows."""
    found: dict[tuple[str, str, str], dict[int, dict]] = defaultdict(dict)
    with sqlite3.connect(folder / "results.sqlite") as db:
        for key, status, metrics, victims in db.execute("SELECT key, status, metrics, victims FROM cells"):
            if status != "ok":
                continue
            parts = dict(p.split("=", 1) for p in key.split("|")[1:])
            entry = {**json.loads(metrics), "rows": json.loads(victims or "[]")}
            found[(parts["model"], parts["state"], parts["attack"])][int(parts["seed"])] = entry
    return found


def above_guess(entry: dict) -> float:
    """Share of scored sequences whose ROUGE-1 beats their own no-information guess's."""
    rows = [r for r in entry["rows"] if r.get("rouge1") is not None and r.get("floor_rouge1") is not None]
    return sum(r["rouge1"] > r["floor_rouge1"] for r in rows) / len(rows) if rows else 0.0


COLUMNS = {
    "DAGER exact": ("dager", lambda e: e.get("exact", 0.0)),
    "TAG ROUGE-1": ("tag", lambda e: e.get("rouge1", 0.0)),
    "TAG above its guess": ("tag", above_guess),
    "bag-of-words recall": ("bag-of-words", lambda e: e.get("bag_recall", 0.0)),
    "test accuracy": ("dager", lambda e: e.get("accuracy", 0.0)),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a finished text-lora run directory")
    args = parser.parse_args()
    found = cells(args.folder)
    models = sorted(
        {m for m, _, _ in found}, key=lambda m: (m != "full", int(m.rsplit("r", 1)[-1]) if "lora" in m else 0)
    )
    for state in ("untrained", "trained"):
        print(f"\n**{state}** (mean over seeds ± 95 % t half-width; LoRA − full paired per seed [95 % CI])\n")
        print("| model | " + " | ".join(COLUMNS) + " |")
        print("|---" * (len(COLUMNS) + 1) + "|")
        for model in models:
            cells_text = []
            for attack, read in COLUMNS.values():
                seeds = found.get((model, state, attack), {})
                if not seeds:
                    cells_text.append("–")
                    continue
                values = {s: read(e) for s, e in seeds.items()}
                text = estimate(list(values.values())).text()
                reference = found.get(("full", state, attack), {})
                common = sorted(set(values) & set(reference))
                if model != "full" and len(common) >= 2:
                    d = difference(
                        [values[s] for s in common], [read(reference[s]) for s in common], 1, 0.025
                    )
                    text += f"; {d.text()}"
                cells_text.append(text)
            print(f"| {model} | " + " | ".join(cells_text) + " |")


if __name__ == "__main__":
    main()
