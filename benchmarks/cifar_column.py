"""The CIFAR-10 column of the reproductions page: PRECODE's Tables 1 and 2 and DCS²'s privacy rows on
128 real CIFAR-10 images (untrained models, round 0), each row with its verdict by the page's rule and,
where the digits run of the same rows is there, the digits verdict beside it and whether the dataset
changes it. The no-information level is each victim's leave-one-out mean (the other 127 images).

    leakshield run configs/precode-cifar.yaml --data-root DIR --out runs/precode-cifar --workers 2
    leakshield run configs/dcs2-cifar.yaml --data-root DIR --out runs/dcs2-cifar --workers 2
    leakshield run configs/precode-cpu.yaml --out runs/precode-cpu --workers 2      (digits, optional)
    leakshield run configs/dcs2-privacy.yaml --out runs/dcs2-privacy --workers 2    (digits, optional)
    python benchmarks/cifar_column.py --runs runs

DIR holds cifar10_victims128.npz (arrays ``images``, 128×32×32×3 uint8, and ``labels``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from leakshield.leaderboard.verdicts import Claim, seed_row

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reproduction_rows import (  # a sibling script, not a package
    HEADER,
    PRECODE_MODELS,
    PRECODE_TABLE1,
    PRECODE_TABLE2,
    _cut,
    no_information,
    seed_scores,
    undefended,
)

ATTACK = "iga-precode"
Reader = Callable[[Path], Any]


def has_run(run: Path) -> bool:
    """Whether ``run`` holds a run's results (the digits runs are optional), or its extract."""
    return (run / "results.sqlite").is_file() or run.with_name(run.name + ".json").is_file()


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def beside(digits: Path, claim_of: Reader, scores_of: Reader, verdict: str, seeds: int) -> str:
    """The digits run's verdict on the same claim and whether the dataset changes ``verdict`` ('' without
    the run; not compared where the digits run has another number of ``seeds``). ``claim_of(run)`` and
    ``scores_of(run)`` read a run's claim (with that run's own null) and its victims' scores per seed."""
    if not has_run(digits):
        return ""
    try:
        scores = scores_of(digits)
        cells = _cells(seed_row("", "", claim_of(digits), scores))
    except SystemExit as refused:  # the digits run cannot check the claim (no undefended leak, say)
        return f"; digits: no claim ({refused})"
    measured, said = cells[2].split(" (")[0], cells[4]
    if len(scores) != seeds:
        return f"; digits: {measured}, {said} ({len(scores)} seeds against {seeds}: not compared)"
    same = "the same verdict" if said == verdict else "**the dataset changes the verdict**"
    return f"; digits: {measured}, {said}: {same}"


def _row(
    text: str, command: str, runs: tuple[Path, Path], claim_of: Reader, scores_of: Reader, note: str
) -> str:
    """The CIFAR-10 run's row (``runs``: CIFAR-10, digits), the digits verdict in its note."""
    cifar, digits = runs
    claim, scores = claim_of(cifar), scores_of(cifar)
    said = _cells(seed_row(text, command, claim, scores, note))[4]
    return seed_row(
        text, command, claim, scores, note + beside(digits, claim_of, scores_of, said, len(scores))
    )


def precode_column(runs: Path) -> list[str]:
    """Table 1 (undefended leak as the paper's ± 0.1 against the no-information level; PRECODE's cut ≤ paper +
    0.1, or half the paper's cut, against the undefended SSIM) and Table 2's SSIM rows, as
    ``reproduction_rows.py precode`` states them, on ``runs/precode-cifar`` beside ``runs/precode-cpu``."""
    cifar, digits = runs / "precode-cifar", runs / "precode-cpu"
    command, note = "`leakshield run configs/precode-cifar.yaml`", "CIFAR-10"
    out = []
    for model, (leak, cut, _, _) in PRECODE_TABLE1.items():
        name = PRECODE_MODELS[model]
        text = f"IGA rebuilds the undefended {name}'s images as the paper reports (Table 1: SSIM {leak})"

        def leak_claim(run: Path, leak: float = leak) -> Claim:
            return Claim(leak, 0.1, round(no_information(run), 3))

        def scores(run: Path, label: str = "none", model: str = model) -> dict[int, list[float]]:
            return seed_scores(run, label, ATTACK, model=model)

        out.append(_row(text, command, (cifar, digits), leak_claim, scores, note))
        rows = [("PRECODE", cut, f"PRECODE cuts IGA's SSIM on the {name} (Table 1: {leak} → {cut})")]
        for label in ("NG-2", "NG-3", "GC", "GC-keep10") if model in PRECODE_TABLE2 else ():
            ssim = PRECODE_TABLE2[model][label.removesuffix("-keep10")][0]
            which = f"`{label}`" + (
                " (the other reading of GC's 10 %; GC's numbers)" if "keep" in label else ""
            )
            rows.append((label, ssim, f"{which} cuts IGA's SSIM on the {name} (Table 2: {leak} → {ssim})"))
        for label, value, text in rows:

            def cut_claim(run: Path, value=value, text=text, model=model, leak=leak) -> Claim:
                return _cut(value, leak, undefended(run, ATTACK, model=model), text)

            def defended(run: Path, label: str = label, model: str = model) -> dict[int, list[float]]:
                return seed_scores(run, label, ATTACK, model=model)

            out.append(_row(text, command, (cifar, digits), cut_claim, defended, note))
    return out


def dcs2_column(runs: Path) -> list[str]:
    """DCS²'s privacy rows at batch 1 (Table 1: IG 0.73 → 0.15, as ≤ 0.25; Table 2: imprint 1.00 → 0.79,
    as ≤ 0.89; both against the undefended SSIM of the same run) on ``runs/dcs2-cifar`` beside
    ``runs/dcs2-privacy``."""
    cifar, digits = runs / "dcs2-cifar", runs / "dcs2-privacy"
    command, note = "`leakshield run configs/dcs2-cifar.yaml`", "CIFAR-10"
    claims = {
        "ig": ("IG's SSIM on the sensitive samples falls to about 0.15 (Table 1: 0.73 → 0.15)", 0.15, 0.73),
        "imprint": ("The imprint attack's SSIM falls to about 0.79 (Table 2: 1.00 → 0.79)", 0.79, 1.0),
    }
    out = []
    for attack, (text, paper, before) in claims.items():
        for label in ("DCS2-eq10", "DCS2-eq10-unboxed"):

            def claim_of(
                run: Path, attack: str = attack, text: str = text, paper=paper, before=before
            ) -> Claim:
                return _cut(paper, before, undefended(run, attack, sensitive=True), text)

            def scores(run: Path, label: str = label, attack: str = attack) -> dict[int, list[float]]:
                return seed_scores(run, label, attack, sensitive=True)

            out.append(_row(f"{text}; `{label}`, batch 1", command, (cifar, digits), claim_of, scores, note))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=Path("runs"), help="folder holding the run directories")
    parser.add_argument("--paper", choices=("precode", "dcs2"), nargs="*", default=["precode", "dcs2"])
    args = parser.parse_args()
    for number, paper in enumerate(args.paper):
        runs = {"precode": precode_column, "dcs2": dcs2_column}[paper](args.runs)
        print(("\n" if number else "") + f"**{paper}, CIFAR-10**\n\n{HEADER}\n|---|---|---|---|---|")
        print("\n".join(runs))


if __name__ == "__main__":
    main()
