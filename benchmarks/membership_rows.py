"""The reproductions page's FedMIA rows (claim | command | measured with 95 % interval and n | rule |
verdict), read from a finished ``leakshield membership`` folder: per seed, TPR at 1 % FPR on the stage-2
candidates (the half of the clients that chose nothing).

    leakshield membership --preset standard --out runs/membership-standard
    python benchmarks/membership_rows.py runs/membership-standard

Zhu et al. (FedMIA, CVPR 2025) claim that FedMIA beats six baselines at low FPR (Table 1) and stays
effective under perturbation, sparsification, MixUp and augmentation. The rules: a win is a TPR at least
1 point (0.01) above the best baseline, against the null of none (0); "stays effective" is a TPR at least
1 point above what a guess scores (0.013 with 150 non-members per seed:
``leakshield.membership.roc.chance_tpr``), against the null of that guess. Only the rows and seeds of the
folder's own config (its ``membership.json``) are read.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from leakshield.leaderboard.verdicts import Claim, row
from leakshield.membership.attacks import attack_of
from leakshield.membership.kept import from_json
from leakshield.membership.roc import chance_tpr
from leakshield.membership.run import SeedRun
from leakshield.membership.section import choose, stage_roc

FPR = 0.01
WIN = Claim(paper=0.01, tolerance=0.0, null=0.0, one_sided=True)
#: FedMIA's defenses (Sec. 5) as the standard preset labels them
ROBUST = ("gaussian-noise σ 0.1", "pruning 99 %", "mixup", "augmentation")


def load(folder: Path) -> dict[str, list[SeedRun]]:
    """The kept (row, seed) runs of a membership folder that its own config names, by row label."""
    export = folder / "membership.json"
    if not export.is_file():
        raise SystemExit(
            f"{folder}: no membership.json (run 'leakshield membership' first: see the docstring)"
        )
    setting = json.loads(export.read_text(encoding="utf-8"))["setting"]
    labels, seeds = {r["label"] for r in setting["rows"]}, set(setting["seeds"])
    found: dict[str, list[SeedRun]] = {}
    for path in sorted((folder / "runs").glob("*.json")):
        run = from_json(json.loads(path.read_text(encoding="utf-8"))["run"])
        if run.row in labels and run.seed in seeds:
            found.setdefault(run.row, []).append(run)
    return {k: sorted(v, key=lambda r: r.seed) for k, v in found.items()}


def tpr(run: SeedRun, cell: str) -> float:
    """TPR at 1 % FPR of ``cell`` on ``run``'s stage-2 candidates."""
    return stage_roc(run, cell, 2).tpr_at(FPR)


def best_baseline(runs: list[SeedRun]) -> str:
    """The baseline cell (any server-view attack but FedMIA's) the section would choose on stage 1."""
    cells = [c for c in runs[0].scores if not attack_of(c).name.startswith("fedmia")]
    found = choose(runs, sorted(cells), FPR)
    assert found is not None
    return found


def rows(folder: Path) -> list[str]:
    runs = load(folder)
    none = runs["none"]
    command = f"`python benchmarks/membership_rows.py {folder}`"
    baseline = best_baseline(none)
    out = [row("FedMIA (Φ averaged over rounds) finds more members at 1 % FPR than the best baseline "
               f"(Table 1); no defense, best baseline chosen on stage 1: `{baseline}`", command, WIN,
               [tpr(r, "fedmia") - tpr(r, baseline) for r in none], "difference per seed"),
           row("FedMIA's test on the first round beats the loss threshold on the same local models",
               command, WIN, [tpr(r, "fedmia-round@0") - tpr(r, "loss@0") for r in none],
               "difference per seed")]  # fmt: skip
    nonmembers = stage_roc(none[0], "fedmia", 2).nonmembers
    chance = round(chance_tpr(nonmembers, FPR), 3)
    effective = Claim(paper=round(chance + 0.01, 3), tolerance=0.0, null=chance, one_sided=True)
    for label in ROBUST:
        if label in runs:
            out.append(row(f"FedMIA stays effective under {label} (Sec. 5)", command, effective,
                           [tpr(r, "fedmia") for r in runs[label]], "TPR at 1 % FPR"))  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a finished 'leakshield membership' output folder")
    print("\n".join(rows(parser.parse_args().folder)))


if __name__ == "__main__":
    main()
