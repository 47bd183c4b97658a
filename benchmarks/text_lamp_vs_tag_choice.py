"""Each attack family's setting from a finished tuning grid (``text_lamp_vs_tag_tuning.yaml``): the
label ``family@setting`` of highest mean ROUGE-2 over the held-out victims (each victim's value the mean
over its batch's sequences; every state and batch size of the grid pooled, each (state, batch, victim)
one value); on a tie the setting listed first in the config. Prints every grid point's mean with its
95 % t-interval and n, then the chosen entries as YAML for the comparison's ``attacks:`` (label the
family, ``iterations`` set to ``--iterations``).

    python benchmarks/text_lamp_vs_tag_choice.py runs/text-lamp-vs-tag-tuning --iterations 2000
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import yaml

from leakshield.leaderboard.intervals import estimate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from text_attack_tables import per_victim, read_cells


def scores(run: Path, metric: str) -> dict[str, list[float]]:
    """Attack label → one ``metric`` per (state, batch, victim) of the run."""
    out: dict[str, list[float]] = {}
    for cell in read_cells(run):
        out.setdefault(cell["attack"], []).extend(per_victim(cell["rows"], metric).values())
    return out


def choose(labels: list[str], found: dict[str, list[float]]) -> dict[str, str]:
    """Family → its label of highest mean (``labels`` in the config's order; the first wins a tie)."""
    best: dict[str, tuple[float, str]] = {}
    for label in labels:
        if label not in found or not found[label]:
            continue
        family = label.split("@", 1)[0]
        mean = statistics.fmean(found[label])
        if family not in best or mean > best[family][0]:
            best[family] = (mean, label)
    return {family: label for family, (_, label) in best.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="the tuning grid's run directory")
    parser.add_argument("--metric", default="rouge2", help="the tuning metric (default rouge2)")
    parser.add_argument("--iterations", type=int, default=2000, help="steps in the emitted entries")
    args = parser.parse_args(argv)
    if not (args.run / "results.sqlite").is_file():
        print(f"{args.run}: no results.sqlite (run the tuning grid first)", file=sys.stderr)
        return 2
    entries = yaml.safe_load((args.run / "config.yaml").read_text())["attacks"]
    labels = [e["label"] or e["name"] for e in entries]
    found = scores(args.run, args.metric)
    print(f"| attack | {args.metric} (95 % interval) | n |\n|---|---|---|")
    for label in labels:
        if found.get(label):
            e = estimate(found[label])
            interval = "" if e.half_width is None else f" [{e.low:.3f}, {e.high:.3f}]"
            print(f"| {label} | {e.mean:.3f}{interval} | {len(found[label])} |")
    chosen = choose(labels, found)
    print()
    for family, label in chosen.items():
        entry = {k: v for k, v in entries[labels.index(label)].items() if v is not None and k != "against"}
        entry.update(label=family, iterations=args.iterations)
        print(f"# {family}: {label}")
        print(yaml.safe_dump([entry], default_flow_style=None, sort_keys=False, width=110).strip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
