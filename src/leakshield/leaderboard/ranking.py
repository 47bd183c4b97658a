"""The leaderboard's ranking: a defense's privacy is its privacy under the *strongest* attack run
against it (never the average), over every attack and every attacked model state; defenses are ranked
by that worst case, and the privacy–utility Pareto front is marked.

Scores: an attack cell's SSIM (per image, matched, averaged over victims), or for the GAN attack of a
malicious client, which reconstructs classes rather than images, its class-level SSIM (Anti-GAN Eq. 5).
Cells are first averaged over seeds. SSIMs are compared at the table's precision (3 decimals: a
difference of 1e-5 between two perfect reconstructions is float noise, not privacy). The strongest
attack has the highest SSIM; ties go to the higher PSNR, then to the attack's name, and the tied
attacks are listed. Failed cells never count as a
defense's success: they are reported next to the standing, and a defense whose attack cells all
failed is unranked."""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from leakshield.experiment.store import CellRecord
from leakshield.leaderboard.threats import threat_of

#: decimals at which SSIMs are compared (and shown)
PRECISION = 3


def level(ssim: float) -> float:
    """An SSIM at the comparison precision."""
    return round(ssim, PRECISION)


@dataclass(frozen=True)
class AttackScore:
    """One attack on one model state of one defense, averaged over seeds."""

    attack: str
    round: int
    ssim: float
    psnr: float | None
    seeds: int
    metric: str = "ssim"
    #: to whom it leaks (the stored threat model's practitioner wording)
    threat: str = ""


@dataclass(frozen=True)
class Standing:
    """A defense's row: its strongest attack (None if none succeeded in running), the attacks tied
    with it, every attack score, its utility, and the cells that failed."""

    model: str
    defense: str
    strongest: AttackScore | None
    tied: tuple[str, ...]
    scores: tuple[AttackScore, ...]
    accuracy: float | None = None
    adr: float | None = None
    epsilon: float | None = None
    cost: float | None = None
    failed: tuple[str, ...] = ()
    pareto: bool = False
    rank: int | None = None
    extra: dict[str, float] = field(default_factory=dict)


def _score(record: CellRecord) -> tuple[float, str] | None:
    for metric in ("ssim", "class_ssim"):
        value = record.metrics.get(metric)
        if isinstance(value, int | float) and math.isfinite(value):
            return float(value), metric
    return None


def attack_scores(records: Sequence[CellRecord]) -> dict[tuple[str, str], list[AttackScore]]:
    """(model, defense) → the seed-averaged score of every (attack, round) that ran successfully."""
    groups: dict[tuple[str, str, str, int], list[tuple[float, float | None, str]]] = defaultdict(list)
    threats: dict[str, str] = {}
    for r in records:
        if r.kind != "attack" or r.status != "ok" or r.model is None or r.defense is None or r.attack is None:
            continue
        scored = _score(r)
        if scored is None:
            continue
        psnr = r.metrics.get("psnr")
        psnr = float(psnr) if isinstance(psnr, int | float) and math.isfinite(psnr) else None
        groups[(r.model, r.defense, r.attack, int(r.round or 0))].append((scored[0], psnr, scored[1]))
        threats.setdefault(r.attack, threat_of(r))
    out: dict[tuple[str, str], list[AttackScore]] = defaultdict(list)
    for (model, defense, attack, round_), values in sorted(groups.items()):
        psnrs = [p for _, p, _ in values if p is not None]
        out[(model, defense)].append(
            AttackScore(
                attack=attack,
                round=round_,
                ssim=sum(v for v, _, _ in values) / len(values),
                psnr=sum(psnrs) / len(psnrs) if psnrs else None,
                seeds=len(values),
                metric=values[0][2],
                threat=threats[attack],
            )
        )
    return out


def strongest(scores: Sequence[AttackScore]) -> tuple[AttackScore | None, tuple[str, ...]]:
    """The strongest of ``scores`` (highest SSIM, then PSNR, then name) and the attacks tied on SSIM."""
    if not scores:
        return None, ()
    key = lambda s: (-level(s.ssim), -(s.psnr if s.psnr is not None else -math.inf), s.attack, s.round)  # noqa: E731
    best = min(scores, key=key)
    same = [s for s in scores if level(s.ssim) == level(best.ssim) and s is not best]
    tied = tuple(sorted({f"{s.attack}@{s.round}" for s in same}))
    return best, tied


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def standings(records: Sequence[CellRecord]) -> list[Standing]:
    """Every (model, defense) with its strongest attack, utility (seed means; ADR against ``none``),
    ε, cost (client seconds per update relative to ``none``) and failed cells; ranked, front marked."""
    scores = attack_scores(records)
    keys = sorted(
        {(r.model, r.defense) for r in records if r.kind in ("attack", "utility") and r.model and r.defense}
    )
    utility: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r.kind == "utility" and r.status == "ok" and r.model and r.defense:
            for name in ("accuracy", "epsilon", "client_seconds"):
                value = r.metrics.get(name)
                if isinstance(value, int | float) and math.isfinite(value):
                    utility[(r.model, r.defense)][name].append(float(value))
    failed: dict[tuple[str, str], list[str]] = defaultdict(list)
    for r in records:
        if r.status != "ok" and r.model and r.defense:
            failed[(r.model, r.defense)].append(f"{r.kind}:{r.attack or '-'}@{r.round}")
    rows = []
    for model, defense in keys:
        util = utility.get((model, defense), {})
        clean = _mean(utility.get((model, "none"), {}).get("accuracy", []))
        acc = _mean(util.get("accuracy", []))
        seconds, base_seconds = (
            _mean(util.get("client_seconds", [])),
            _mean(utility.get((model, "none"), {}).get("client_seconds", [])),
        )
        best, tied = strongest(scores.get((model, defense), []))
        rows.append(
            Standing(
                model=model,
                defense=defense,
                strongest=best,
                tied=tied,
                scores=tuple(scores.get((model, defense), [])),
                accuracy=acc,
                adr=(clean - acc) / clean if clean and acc is not None else None,
                epsilon=_mean(util.get("epsilon", [])),
                cost=seconds / base_seconds if seconds is not None and base_seconds else None,
                failed=tuple(sorted(failed.get((model, defense), []))),
            )
        )
    return rank(mark_pareto(rows))


def dominates(a: Standing, b: Standing) -> bool:
    """``a`` is at least as private (lower strongest SSIM) and as accurate as ``b``, better in one."""
    if a.strongest is None or b.strongest is None or a.accuracy is None or b.accuracy is None:
        return False
    sa, sb = level(a.strongest.ssim), level(b.strongest.ssim)
    no_worse = sa <= sb and a.accuracy >= b.accuracy
    better = sa < sb or a.accuracy > b.accuracy
    return no_worse and better


def mark_pareto(rows: list[Standing]) -> list[Standing]:
    """Mark the rows no other row of the same model dominates (identical points are both on the front);
    rows without a strongest attack or an accuracy are off the front."""
    out = []
    for row in rows:
        placed = row.strongest is not None and row.accuracy is not None
        beaten = any(dominates(o, row) for o in rows if o is not row and o.model == row.model)
        out.append(_replace(row, pareto=placed and not beaten))
    return out


def rank(rows: list[Standing]) -> list[Standing]:
    """Order by model, then strongest-attack SSIM ascending (more private first), ties by accuracy
    (higher first) then name; equal (SSIM, accuracy) share a rank. Unranked rows go last."""

    def key(row: Standing) -> tuple:
        if row.strongest is None:
            return (row.model, 1, 0.0, 0.0, row.defense)
        return (
            row.model,
            0,
            level(row.strongest.ssim),
            -(row.accuracy if row.accuracy is not None else -1.0),
            row.defense,
        )

    ordered = sorted(rows, key=key)
    out: list[Standing] = []
    for row in ordered:
        if row.strongest is None:
            out.append(row)
            continue
        previous = out[-1] if out and out[-1].model == row.model and out[-1].rank is not None else None
        if previous is not None and key(previous)[2:4] == key(row)[2:4]:
            number = previous.rank
        else:
            number = 1 + sum(1 for o in out if o.model == row.model and o.rank is not None)
        out.append(_replace(row, rank=number))
    return out


def _replace(row: Standing, **changes: object) -> Standing:
    return dataclasses.replace(row, **changes)  # type: ignore[arg-type]
