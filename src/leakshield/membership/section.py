"""The membership section: defenses ranked per threat model on TPR at a low FPR, by the leaderboard's
rule (:mod:`leakshield.leaderboard.comparisons`): seeds as the unit, each row's strongest attack cell
*chosen* on stage-1 candidates (the first half of the clients) and *measured* on stage-2 candidates (the
other half, fresh records of the same run), each row against no defense by a one-sided paired t-test over
seeds with Holm's correction and its simultaneous interval, letters from all pairs, and the utility gate
(accuracy below chance + ½ (undefended − chance): "does not train", shown, never compared). A table
whose no-defense row is not measurably above chance (its interval's low end at or below what a guess
scores at that FPR with the stage's non-members, :func:`~leakshield.membership.roc.chance_tpr`) ranks
nothing.

Two threat tables: the **honest-but-curious server** (every client's update, every round; a row with
secure aggregation gives it only the global-view attacks) and **what the global models reveal** (a
participating client, or any server under secure aggregation). Rows with a formal ε carry the DP ceiling
at the table's FPR and the empirical audit (:mod:`.ceiling`) of their strongest cell's stage-2 scores,
pooled over seeds."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from leakshield.leaderboard.comparisons import (
    ALPHA_PAIRS,
    ALPHA_VERSUS_NONE,
    Difference,
    letter_display,
    pairwise_different,
    versus_reference,
)
from leakshield.leaderboard.intervals import Estimate, estimate, level
from leakshield.membership.attacks import attack_of
from leakshield.membership.ceiling import Audit, audit, dp_ceiling
from leakshield.membership.config import REFERENCE
from leakshield.membership.roc import Roc, chance_tpr, split_scores
from leakshield.membership.run import SeedRun

#: the second, lower FPR level every table reports where the non-members resolve it
LOWEST_FPR = 0.001

#: the threat tables: key → (title, whether only global-view attacks apply)
THREATS = {
    "server": ("honest-but-curious server (every client's update)", False),
    "global": ("participant, or server under secure aggregation (global models only)", True),
}


@dataclass(frozen=True)
class Standing:
    """One defense row of one threat table."""

    row: str
    threat: str
    strongest: str | None
    per_seed: dict[int, float]
    tpr: Estimate | None
    tpr_lowest: Estimate | None
    auc: Estimate | None
    accuracy: Estimate
    chance_accuracy: float
    trains: bool
    epsilon: float | None = None
    delta: float | None = None
    audit: Audit | None = None
    ceiling: float | None = None
    difference: Difference | None = None
    letters: str = ""
    place: int | None = None
    #: ``record`` or ``client`` (client-level DP bounds any one record of the client too)
    epsilon_unit: str = "record"
    #: the row has an ε that does not cover this table's adversary (central DP against the server)
    uncovered: bool = False
    #: stage-2 non-members per seed (the smallest over seeds): FPR is resolved in steps of 1/n
    nonmembers: int = 0
    roc: Roc | None = field(default=None, compare=False)


def _cells(run: SeedRun, only_global: bool) -> list[str]:
    return [c for c in run.scores if attack_of(c).global_view or not only_global]


def in_stage(run: SeedRun, stage: int) -> np.ndarray:
    """Which of ``run``'s candidates belong to ``stage``."""
    return np.asarray(run.stage) == stage


def stage_roc(run: SeedRun, cell: str, stage: int) -> Roc:
    """The ROC of ``cell`` on ``run``'s ``stage`` candidates."""
    keep = in_stage(run, stage)
    return split_scores(run.array(cell)[keep], np.asarray(run.member)[keep])


def choose(runs: Sequence[SeedRun], cells: Sequence[str], fpr: float) -> str | None:
    """The strongest cell on stage 1: highest mean TPR at ``fpr`` over seeds, then mean AUC, then name."""
    if not cells:
        return None

    def key(cell: str) -> tuple:
        rocs = [stage_roc(r, cell, 1) for r in runs]
        return (-level(float(np.mean([c.tpr_at(fpr) for c in rocs]))),
                -level(float(np.mean([c.auc for c in rocs]))), cell)  # fmt: skip

    return min(cells, key=key)


#: the FPR grid of the seed-averaged ROC curves (log-spaced, the figures' axis)
ROC_GRID = np.r_[0.0, np.logspace(-3, 0, 61)]


def mean_roc(rocs: Sequence[Roc]) -> Roc:
    """The seeds' ROC curves averaged vertically (the mean TPR at each FPR of :data:`ROC_GRID`): seeds
    are not pooled, since scores need not share a scale. Counts are the first seed's."""
    curves = [[each.tpr_at(level) for level in ROC_GRID] for each in rocs]
    return Roc(ROC_GRID.copy(), np.mean(curves, axis=0), rocs[0].members, rocs[0].nonmembers)


def _stage_scores(runs: Sequence[SeedRun], cell: str, member: bool, stage: int = 2) -> np.ndarray:
    """``cell``'s scores of the ``stage`` members (or non-members) of every run, pooled."""
    return np.concatenate(
        [r.array(cell)[in_stage(r, stage) & (np.asarray(r.member) == member)] for r in runs]
    )


def standing(row: str, threat: str, runs: Sequence[SeedRun], fpr: float) -> Standing:
    """A row's standing in ``threat``'s table from its seeds' runs (selection on stage 1, headline on
    stage 2)."""
    only_global = THREATS[threat][1]
    runs = sorted(runs, key=lambda r: r.seed)
    usable = set(_cells(runs[0], only_global)) if runs else set()
    for r in runs:
        usable &= set(_cells(r, only_global))
    best = choose(runs, sorted(usable), fpr)
    accuracy = estimate([r.accuracy for r in runs])
    chance_accuracy = float(np.mean([r.chance_accuracy for r in runs]))
    held = [g for r in runs if (g := r.guarantee(server=not only_global)) is not None]
    loosest = max(held, key=lambda g: (g.epsilon, g.delta), default=None)  # the weakest seed's
    epsilon, delta = (loosest.epsilon, loosest.delta) if loosest else (None, None)
    unit = loosest.unit if loosest else "record"
    uncovered = any(r.guarantees for r in runs) and not held
    found = Standing(row, threat, best, {}, None, None, None, accuracy, chance_accuracy, True, epsilon, delta,
                     epsilon_unit=unit, uncovered=uncovered)  # fmt: skip
    if best is None:
        return found
    stage2 = [r for r in runs if 2 in r.stage]
    rocs = [stage_roc(r, best, 2) for r in stage2]
    per_seed = {r.seed: each.tpr_at(fpr) for r, each in zip(stage2, rocs, strict=True)}
    nonmembers = min(each.nonmembers for each in rocs)
    lowest = None  # TPR at 0.1 % FPR: resolved only from 1,000 non-members per seed on
    if nonmembers * LOWEST_FPR >= 1:
        lowest = estimate([each.tpr_at(LOWEST_FPR) for each in rocs])
    checked, ceiling = None, None
    if epsilon is not None and delta is not None:
        checked = audit(_stage_scores(stage2, best, True), _stage_scores(stage2, best, False), epsilon, delta)
        ceiling = float(dp_ceiling(fpr, epsilon, delta))
    return dataclasses.replace(
        found, per_seed=per_seed, tpr=estimate(list(per_seed.values())), tpr_lowest=lowest,
        auc=estimate([each.auc for each in rocs]), audit=checked, ceiling=ceiling, nonmembers=nonmembers,
        roc=mean_roc(rocs),
    )  # fmt: skip


def _trains(row: Standing, reference: Standing | None) -> bool:
    if reference is None or row.row == REFERENCE:
        return True
    gate = row.chance_accuracy + 0.5 * (reference.accuracy.mean - row.chance_accuracy)
    return row.accuracy.mean >= gate


def rank(rows: Sequence[Standing], fpr: float) -> tuple[list[Standing], bool]:
    """The table's rows in order, each with its place, difference from no defense and letters; and
    whether the positive control passed (no defense measurably above chance at ``fpr``)."""
    reference = next((r for r in rows if r.row == REFERENCE and r.tpr is not None), None)
    rows = [dataclasses.replace(r, trains=_trains(r, reference)) for r in rows]
    control = (reference is not None and reference.tpr is not None
               and reference.tpr.above(chance_tpr(reference.nonmembers, fpr)))  # fmt: skip
    compared = [r for r in rows if r.tpr is not None and r.trains] if control else []
    compared.sort(key=lambda r: (level(r.tpr.mean), -r.accuracy.mean, r.row))  # type: ignore[union-attr]
    others = [r for r in compared if r.row != REFERENCE]
    differences = []
    if others and reference is not None:
        differences = versus_reference([r.per_seed for r in others], reference.per_seed, ALPHA_VERSUS_NONE)
    by_row = {r.row: d for r, d in zip(others, differences, strict=True)}
    letters = letter_display(len(compared), pairwise_different([r.per_seed for r in compared], ALPHA_PAIRS))
    placed = [dataclasses.replace(r, place=i + 1, difference=by_row.get(r.row), letters=letters[i])
              for i, r in enumerate(compared)]  # fmt: skip
    rest = sorted((r for r in rows if r not in compared), key=lambda r: r.row)
    return placed + rest, control


def table_rows(rows: Sequence[Standing], fpr: float, control: bool) -> tuple[list[str], list[list[str]]]:
    """Header and cells of a threat table (Markdown and HTML share them)."""
    head = ["#", "defense", "strongest attack (stage 1)", f"TPR @ {fpr * 100:g} % FPR (stage 2)", "vs none",
            "letters", f"TPR @ {LOWEST_FPR * 100:g} % FPR", "AUC", "accuracy", "ε (δ)",
            f"DP ceiling @ {fpr * 100:g} % FPR; audit"]  # fmt: skip
    out = [[_status(r, control), r.row, r.strongest or "—", r.tpr.text() if r.tpr else "—",
            r.difference.text() if r.difference else ("reference" if r.row == REFERENCE else "—"), r.letters,
            r.tpr_lowest.text() if r.tpr_lowest else (f"— ({r.nonmembers} non-members)" if r.tpr else "—"),
            r.auc.text() if r.auc else "—", r.accuracy.text(), _epsilon_text(r), _audit_text(r)]
           for r in rows]  # fmt: skip
    return head, out


def _status(r: Standing, control: bool) -> str:
    if r.tpr is None:
        return "no attack applies"
    if not control:
        return "unranked: even no defense is not measurably above chance"
    return str(r.place) if r.trains else "does not train at this budget"


def _epsilon_text(r: Standing) -> str:
    if r.uncovered:
        return "none against this adversary (central DP: the server sees every clipped update)"
    if r.epsilon is None:
        return "—"
    level = "" if r.epsilon_unit == "record" else ", client-level"
    return ("∞" if math.isinf(r.epsilon) else f"{r.epsilon:.2f}") + f" ({r.delta:g}{level})"


def _audit_text(r: Standing) -> str:
    if r.audit is None:
        return "—"
    verdict = "exceeds the reported ε" if r.audit.violates else "within ε"
    if r.audit.vacuous and not r.audit.violates:
        verdict = f"within ε, vacuously (n forces at most {r.audit.reach:.2f})"
    return f"TPR ≤ {r.ceiling:.3f}; ε ≥ {r.audit.epsilon_low:.2f} measured, {verdict}"
