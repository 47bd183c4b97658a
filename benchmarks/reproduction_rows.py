"""The reproductions page's rows in its format (claim | command | measured with 95 % interval and n |
rule | verdict), read from finished run directories: per seed, the victims' scores from the attack
cells and the accuracy from the utility cells; verdicts by ``leakshield.leaderboard.verdicts``.

    leakshield run configs/dcs2-privacy.yaml --out runs/dcs2-privacy --workers 2
    leakshield run configs/dcs2-batch4-privacy.yaml --out runs/dcs2-batch4-privacy --workers 2
    leakshield run configs/dcs2-accuracy.yaml --out runs/dcs2-accuracy --workers 2
    python benchmarks/reproduction_rows.py dcs2 --runs runs

    leakshield run configs/precode-cpu.yaml --out runs/precode-cpu --workers 2
    leakshield run configs/precode-accuracy.yaml --out runs/precode-accuracy --workers 2
    leakshield run configs/precode-training.yaml --out runs/precode-training --workers 2
    leakshield run configs/precode-epoch50.yaml --out runs/precode-epoch50 --workers 2
    python benchmarks/reproduction_rows.py precode --runs runs

Each paper's claims, and the tolerance and null of each, are stated below beside the paper's numbers.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from leakshield.experiment.store import CellRecord
from leakshield.leaderboard.verdicts import Claim, measured_verdict, row, seed_row, seeds_to_decide

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_extracts import STORES_READ, _records, export


def _cells(run: Path, kind: str) -> list[CellRecord]:
    return [r for r in _records(run) if r.kind == kind]


def _finished(cells: list[CellRecord], what: str, run: Path) -> list[CellRecord]:
    if not cells:
        raise SystemExit(f"{run}: no {what} cell")
    if failed := [c.seed for c in cells if c.status != "ok"]:
        raise SystemExit(f"{run}: {what} did not finish for seeds {failed} (rerun with --retry-failed)")
    return cells


def seed_scores(
    run: Path,
    defense: str,
    attack: str,
    *,
    model: str | None = None,
    at_round: int | None = None,
    sensitive: bool = False,
    metric: str = "ssim",
) -> dict[int, list[float]]:
    """Per model seed, one score per victim batch: the batch's mean ``metric`` (over its sensitive images
    only, with ``sensitive``), from the attack cells of ``defense`` × ``attack`` (at ``model`` and
    ``at_round`` where the run has several). The victims are the same batches at every seed; a seed
    draws the model they are attacked on. Several models or rounds, unpicked, are refused."""
    what = " · ".join(str(v) for v in (attack, defense, model, at_round) if v is not None)
    cells = [
        c
        for c in _cells(run, "attack")
        if (c.defense, c.attack) == (defense, attack)
        and model in (None, c.model)
        and at_round in (None, c.round)
    ]
    cells = _finished(cells, what, run)
    if len({c.seed for c in cells}) < len(cells):
        raise SystemExit(f"{run}: {what} ran at several models or rounds per seed; this reads one of each")
    out = {}
    for cell in sorted(cells, key=lambda c: c.seed or 0):
        values = []
        for victim in cell.victims:
            scores = victim[metric]
            flags = victim.get("sensitive") if sensitive else [True] * len(scores)
            if None in scores:
                raise SystemExit(f"{run}: {what} has a victim whose {metric} failed (seed {cell.seed})")
            if not flags or not any(flags):
                raise SystemExit(f"{run}: {what} has a victim without sensitive flags")
            picked = [v for v, f in zip(scores, flags, strict=True) if f]
            values.append(sum(picked) / len(picked))
        out[cell.seed or 0] = values
    return out


def mean_of_seeds(by_seed: dict[int, list[float]]) -> float:
    """The mean of the seed means (each seed weighs alike)."""
    return sum(sum(v) / len(v) for v in by_seed.values()) / len(by_seed)


def accuracies(run: Path, defense: str, model: str | None = None) -> dict[int, float]:
    """Test accuracy after the utility rounds, per seed (of ``model`` where the run has several)."""
    what = f"utility {defense}" + (f" · {model}" if model else "")
    cells = [c for c in _cells(run, "utility") if c.defense == defense and model in (None, c.model)]
    cells = _finished(cells, what, run)
    if len({c.seed for c in cells}) < len(cells):
        raise SystemExit(f"{run}: {what} ran several cells per seed (several models?)")
    return {c.seed: c.metrics["accuracy"] for c in cells}


def drops(run: Path, defense: str, reference: str = "none", model: str | None = None) -> list[float]:
    """The accuracy lost to ``defense``, paired by seed with ``reference`` (the same seeds on both)."""
    ours, theirs = accuracies(run, defense, model), accuracies(run, reference, model)
    if set(ours) != set(theirs):
        raise SystemExit(f"{run}: {defense} ran seeds {sorted(ours)}, {reference} {sorted(theirs)}")
    return [theirs[s] - ours[s] for s in sorted(ours)]


def no_information(run: Path, sensitive: bool = False) -> float:
    """The SSIM of the run's no-information baseline (the mean image) at its victims (the mean over its
    baseline cells, one per seed where a run stores one per seed: the victims are the same)."""
    cells, metric = (
        _finished(_cells(run, "baseline"), "baseline", run),
        "ssim_sensitive" if sensitive else "ssim",
    )
    if len({c.scale for c in cells}) > 1 or len({c.seed for c in cells}) < len(cells):
        raise SystemExit(f"{run}: {len(cells)} baseline cells (scale axes?); this reads one per seed")
    if any(metric not in c.metrics for c in cells):
        raise SystemExit(f"{run}: the baseline has no {metric} (no sensitive samples in this run?)")
    return sum(c.metrics[metric] for c in cells) / len(cells)


def undefended(
    run: Path, attack: str, *, model: str | None = None, at_round: int | None = None, sensitive: bool = False
) -> float:
    """The attack's mean score with no defense (over the seed means): the null of a defense's claim. A
    defense's claim needs an attack that leaks without it: the mean must beat the run's no-information
    baseline (the mean image) by 0.1, or there is nothing for the defense to stop."""
    by_seed = seed_scores(run, "none", attack, model=model, at_round=at_round, sensitive=sensitive)
    mean = mean_of_seeds(by_seed)
    if not leaks(run, mean, sensitive):
        what = " · ".join(str(v) for v in (attack, model, at_round) if v is not None)
        why = f"{mean:.3f} against the no-information {no_information(run, sensitive):.3f}"
        raise SystemExit(f"{run}: {what} does not leak without a defense ({why}): no claim to check")
    return mean


def leaks(run: Path, mean: float, sensitive: bool = False) -> bool:
    """Whether an attack's mean score beats the run's no-information baseline by 0.1."""
    return mean > no_information(run, sensitive) + 0.1


def _cut(paper: float, before: float, null: float, what: str) -> Claim:
    """A defense's cut of an attack's score from the paper's ``before`` to its ``paper`` value (a
    stronger cut counts), against the undefended score measured here. The tolerance is 0.1, or half the
    paper's own cut where that is smaller (so the paper's undefended score never counts as its
    defended one); refused when the undefended score is not above the region."""
    tolerance = min(0.1, round((before - paper) / 2, 3))
    if null <= paper + tolerance:
        raise SystemExit(f"{what}: undefended {null:.3f} within {paper} + {tolerance}: no cut to check")
    return Claim(paper=paper, tolerance=tolerance, null=round(null, 3), one_sided=True)


def dcs2_privacy_rows(runs: Path) -> list[str]:
    """DCS² (Wu et al., AAAI 2024), privacy over three model seeds. Table 1 (CIFAR-10, GS attack): SSIM
    0.73 undefended, 0.15 with DCS², checked as ≤ 0.15 + 0.1 (a stronger cut counts) against the
    undefended SSIM measured in the same run; Table 2 (TinyImageNet, imprint): 1.00 → 0.79, as ≤ 0.79 +
    0.1. At batch 4 IG does not leak undefended (``undefended`` refuses it), so batch 4 is checked with
    imprint only."""
    base, batch4 = runs / "dcs2-privacy", runs / "dcs2-batch4-privacy"
    claims = {
        "ig": ("IG's SSIM on the sensitive samples falls to about 0.15 (Table 1: 0.73 → 0.15)", 0.15),
        "imprint": ("The imprint attack's SSIM falls to about 0.79 (Table 2: 1.00 → 0.79)", 0.79),
    }
    out = []
    for attack, run, label, batch in (
        ("ig", base, "DCS2-eq10", "batch 1"),
        ("ig", base, "DCS2-eq10-unboxed", "batch 1"),
        ("imprint", base, "DCS2-eq10", "batch 1"),
        ("imprint", base, "DCS2-eq10-unboxed", "batch 1"),
        ("imprint", batch4, "DCS2-eq10", "batch 4 with one sensitive sample"),
    ):
        text, paper = claims[attack]
        claim = _cut(
            paper, {"ig": 0.73, "imprint": 1.0}[attack], undefended(run, attack, sensitive=True), text
        )
        out.append(seed_row(f"{text}; `{label}`, {batch}", f"`leakshield run configs/{run.name}.yaml`",
                            claim, seed_scores(run, label, attack, sensitive=True)))  # fmt: skip
    return out


def dcs2_cost_rows(runs: Path) -> list[str]:
    """DCS²'s Table 1 accuracy, 80.41 → 79.79 %: a drop of 0.6 points, as ≤ 0.6 + 2 points (a gain
    counts) against a 5-point cost, over three seeds paired."""
    cost = Claim(paper=0.006, tolerance=0.02, null=0.05, one_sided=True)
    text = "DCS² costs about 0.6 points of accuracy (Table 1: 80.41 → 79.79 %); `{}`, drop from no defense"
    command = "`leakshield run configs/dcs2-accuracy.yaml`"
    labels = ("DCS2-eq10", "DCS2-eq10-div-d", "DCS2-eq10-unboxed")
    run = runs / "dcs2-accuracy"
    return [_cost_row(text.format(label), command, cost, drops(run, label)) for label in labels]


def _cost_row(text: str, command: str, claim: Claim, lost: list[float]) -> str:
    """A drop in accuracy per seed, paired, with the seeds an interval at this spread would need to
    decide where these do not."""
    found, said = measured_verdict(claim, lost)
    needed = seeds_to_decide(claim, found) if said == "inconclusive" else None
    more = f"; about {needed} seeds would decide at this mean and spread" if needed else ""
    if said == "inconclusive" and needed is None and found.half_width:
        more = "; more than 100 seeds would be needed at this mean and spread"
    return row(text, command, claim, lost, f"per seed, paired{more}")


PRECODE_MODELS = {"smlp": "SMLP", "dmlp": "DMLP", "lenet-tanh": "LeNet"}
#: Table 1 (CIFAR-10), per model: SSIM undefended and with PRECODE, test accuracy (%) undefended and with
#: PRECODE
PRECODE_TABLE1 = {
    "smlp": (0.99, 0.03, 53.07, 51.75),
    "dmlp": (0.99, 0.01, 54.92, 54.16),
    "lenet-tanh": (0.55, 0.10, 61.19, 58.99),
}
#: Table 2 (CIFAR-10), per model and baseline: SSIM and test accuracy (%); GC-keep10 is checked against
#: GC's numbers (it is the other reading of the same "10 %")
PRECODE_TABLE2 = {
    "dmlp": {"NG-2": (0.03, 42.55), "NG-3": (0.62, 51.36), "GC": (0.42, 10.04)},
    "lenet-tanh": {"NG-2": (0.22, 54.36), "NG-3": (0.49, 62.13), "GC": (0.18, 23.40)},
}


#: the SSIM at which a reconstruction counts as recognizable (PRECODE's ASR)
ASR_SSIM = 0.6


def _cost(paper: float, costly: bool, tolerance: float = 0.02) -> Claim:
    """A defense's drop in accuracy: a claim that it costs about the paper's drop (``costly``: the drop
    ± 2 points, two-sided, against no cost: a larger cost is not the paper's), or that it costs little
    (≤ the drop + 2 points, against a 5-point cost; a gain counts)."""
    if costly:
        return Claim(paper=round(paper, 4), tolerance=tolerance, null=0.0)
    return Claim(paper=round(paper, 4), tolerance=tolerance, null=0.05, one_sided=True)


def _cost_text(label: str, model: str, before: float, after: float) -> tuple[str, Claim]:
    """A row's claim on a cost in accuracy, in words, and its rule: a drop of more than 2 points is a
    claim of that cost, less a claim of little or none."""
    drop = (before - after) / 100
    if drop > 0.02:
        said = f"costs about {100 * drop:.1f} points of"
    else:
        said = f"costs at most about {100 * (drop + 0.02):.1f} points of"  # the region's edge
    text = f"{label} {said} the {model}'s test accuracy (Table 2: {before} → {after} %)"
    return text + ", drop", _cost(drop, costly=drop > 0.02)


def precode_rows(runs: Path, costs: bool = True, training: bool = True) -> list[tuple[str, list[str]]]:
    """PRECODE (Scheliga et al., WACV 2022); privacy over three model seeds (``costs``: with the rows of
    accuracy, read from ``precode-accuracy``; ``training``: with Sec. 5.5's).

    Table 1: IGA rebuilds the undefended models as the paper reports (SSIM 0.99, 0.99, 0.55), checked
    two-sided as the paper's value ± 0.1 against the no-information baseline; PRECODE cuts SSIM to 0.03 /
    0.01 / 0.10, as ≤ value + 0.1 against the undefended SSIM; it costs 1.3 / 0.8 / 2.2 points ("small
    impact"), as ≤ drop + 2 points against a 5-point cost. Table 2: NG-2, NG-3 and GC (both readings, the
    paper's GC numbers for both) cut SSIM on DMLP and LeNet to the paper's values (≤ value + 0.1, or half
    the paper's cut where smaller: LeNet's NG-3, 0.55 → 0.49) and cost its drops (a drop above 2 points:
    the drop ± 2 points against no cost; else ≤ drop + 2 points against a 5-point cost). Sec. 5.5: with
    PRECODE, SSIM stays below 0.15 at round 0 and after 1 and 50 epochs (≤ 0.15 exactly, the paper's own
    bound, against the undefended SSIM at that round), and "no recognizable visual structures" are
    rebuilt: the share of victims at SSIM ≥ 0.6 (the paper's ASR, 0 % with PRECODE in Table 1) is ≤ 0.1
    against the undefended share (no row where that is ≤ 0.1 too). Where the undefended model does not
    beat the no-information level by 0.1 a *holds* would be vacuous and is refused, while a failure
    still reads. 50 epochs is read from its 16-victim run (the first 8 are the training run's)."""
    cpu, accuracy, attack = runs / "precode-cpu", runs / "precode-accuracy", "iga-precode"

    def cmd(config: str) -> str:
        return f"`leakshield run configs/{config}.yaml`"

    def cost(text: str, claim: Claim, label: str, model: str) -> list[str]:
        if not costs:
            return []
        return [_cost_row(text, cmd("precode-accuracy"), claim, drops(accuracy, label, model=model))]

    table1, table2 = [], []
    nothing = round(no_information(cpu), 3)
    for model, (leak, cut, before, after) in PRECODE_TABLE1.items():
        name = PRECODE_MODELS[model]
        scores = seed_scores(cpu, "none", attack, model=model)
        text = f"IGA rebuilds the undefended {name}'s images as the paper reports (Table 1: SSIM {leak})"
        table1.append(seed_row(text, cmd("precode-cpu"), Claim(leak, 0.1, nothing), scores))
        text = f"PRECODE cuts IGA's SSIM on the {name} (Table 1: {leak} → {cut})"
        claim = _cut(cut, leak, undefended(cpu, attack, model=model), text)
        scores = seed_scores(cpu, "PRECODE", attack, model=model)
        table1.append(seed_row(text, cmd("precode-cpu"), claim, scores))
        text = f"PRECODE costs the {name} little test accuracy (Table 1: {before} → {after} %), drop"
        table1 += cost(text, _cost((before - after) / 100, costly=False), "PRECODE", model)
    for model, baselines in PRECODE_TABLE2.items():
        name, null = PRECODE_MODELS[model], undefended(cpu, attack, model=model)
        leak, before = PRECODE_TABLE1[model][0], PRECODE_TABLE1[model][2]
        for label in ("NG-2", "NG-3", "GC", "GC-keep10"):
            ssim, after = baselines[label.removesuffix("-keep10")]
            which = f"`{label}`" + (
                " (the other reading of GC's 10 %; GC's numbers)" if "keep" in label else ""
            )
            text = f"{which} cuts IGA's SSIM on the {name} (Table 2: {leak} → {ssim})"
            scores = seed_scores(cpu, label, attack, model=model)
            table2.append(seed_row(text, cmd("precode-cpu"), _cut(ssim, leak, null, text), scores))
            text, claim = _cost_text(which, name, before, after)
            table2 += cost(text, claim, label, model)
    tables = [("Table 1", table1), ("Table 2", table2)]
    return tables + ([("Sec. 5.5: over training", precode_training_rows(runs))] if training else [])


def precode_training_rows(runs: Path) -> list[str]:
    """PRECODE's Sec. 5.5 rows (see :func:`precode_rows`), from ``precode-training`` and
    ``precode-epoch50``."""
    training, epoch50, attack, name_of = (
        runs / "precode-training",
        runs / "precode-epoch50",
        "iga-precode",
        PRECODE_MODELS.get,
    )
    progress = []
    for model in ("dmlp", "lenet-tanh"):
        for epochs, run in ((0, training), (1, training), (50, epoch50)):
            plain = seed_scores(run, "none", attack, model=model, at_round=epochs)
            scores = seed_scores(run, "PRECODE", attack, model=model, at_round=epochs)
            null = mean_of_seeds(plain)
            note = "" if leaks(run, null) else "undefended at the no-information level"
            when = f"; after {epochs} epoch{'' if epochs == 1 else 's'}"
            text = f"With PRECODE, IGA's SSIM on the {name_of(model)} stays below 0.15 (Sec. 5.5){when}"
            if null <= 0.15:
                raise SystemExit(
                    f"{text}: undefended {null:.3f} is below the bound itself: no claim to check"
                )
            claim = Claim(0.15, 0.0, round(null, 3), one_sided=True)
            command = f"`leakshield run configs/{run.name}.yaml`"
            lines = [seed_row(text, command, claim, scores, note)]
            text = f"With PRECODE, no image of the {name_of(model)} is rebuilt recognizably (Sec. 5.5;"
            text += f" Table 1: ASR 0 %), share at SSIM ≥ {ASR_SSIM}{when}"
            pooled = [v for values in plain.values() for v in values]
            share = sum(v >= ASR_SSIM for v in pooled) / len(pooled)
            if share > 0.1:  # else the undefended model rebuilds none either: no share to deny
                claim = Claim(0.0, 0.1, round(share, 3), one_sided=True)
                hits = {seed: [v >= ASR_SSIM for v in values] for seed, values in scores.items()}
                lines.append(seed_row(text, command, claim, hits, note, share=True))
            if not leaks(run, null) and any(line.endswith("| holds |") for line in lines):
                raise SystemExit(f"{text}: undefended {null:.3f} does not leak; a hold says nothing")
            progress += lines
    return progress


HEADER = (
    "| claim (paper) | command | measured (95 % interval, n) | rule: paper ± tolerance · null | verdict |"
)
PAPERS: dict[str, Callable[[Path, bool], list[tuple[str, list[str]]]]] = {
    "dcs2": lambda runs, costs: [("", dcs2_privacy_rows(runs) + (dcs2_cost_rows(runs) if costs else []))],
    "precode": lambda runs, costs: precode_rows(runs, costs=costs, training=costs),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paper", choices=sorted(PAPERS))
    parser.add_argument("--runs", type=Path, default=Path("runs"), help="folder holding the run directories")
    parser.add_argument(
        "--export", type=Path, metavar="FOLDER",
        help="also write each run read as FOLDER/RUN.json (what the rows read; --runs FOLDER reads them)",
    )  # fmt: skip
    parser.add_argument(
        "--privacy", action="store_true",
        help="only the privacy rows over seeds (no accuracy rows; PRECODE: Tables 1 and 2, not Sec. 5.5)",
    )  # fmt: skip
    args = parser.parse_args()
    for number, (title, rows) in enumerate(PAPERS[args.paper](args.runs, not args.privacy)):
        if number:
            print()
        if title:
            print(f"**{title}**\n")
        print(HEADER)
        print("|---|---|---|---|---|")
        for line in rows:
            print(line)
    if args.export:
        for run in STORES_READ:
            print(f"exported {export(run, args.export)}", file=sys.stderr)


if __name__ == "__main__":
    main()
