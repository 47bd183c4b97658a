"""The leaderboard's ranking, one per threat model: a defense's privacy against an adversary is its
privacy under the *strongest* attack that adversary can run (never the average), over every attack and
attacked model state; defenses are ranked by that worst case, and the privacy–utility front is marked.

Scores: an attack cell's SSIM (per image, matched, averaged over victims), or for the GAN attack of a
malicious client, which reconstructs classes rather than images, its class-level SSIM (Anti-GAN Eq. 5).
Each (attack, round, scale) is a mean over seeds with a 95 % t-interval (:mod:`.intervals`).

Leakage is *measurable* only when the whole interval lies above the no-information level: the public
mean image's SSIM (the baseline cells), or, for an attack that draws from a prior (GGL), the higher of
that and its prior's own draw for the known labels (``prior_ssim``): a plausible digit of the right
class is not leakage. Defenses without measurable leakage tie at the top. The strongest attack is the
measurable one with the highest SSIM (ties: higher PSNR, then name; the attacks tied on SSIM are
listed). Leaking defenses are ordered by it, and share a rank where their intervals overlap the rank's
first (from one seed: where SSIM and accuracy are equal at 3 decimals). Failed cells never count as a
defense's success: they are listed, and a defense whose attack cells all failed is unranked."""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from leakshield.experiment.store import CellRecord
from leakshield.leaderboard.intervals import PRECISION, Estimate, estimate, level
from leakshield.leaderboard.threats import threat_of

__all__ = ["PRECISION", "AttackScore", "Standing", "level", "rank", "standings", "strongest", "threats"]


@dataclass(frozen=True)
class AttackScore:
    """One attack on one model state (and scale) of one defense, over seeds."""

    attack: str
    round: int
    ssim: float
    psnr: float | None
    seeds: int
    metric: str = "ssim"
    #: to whom it leaks (the stored threat model's practitioner wording)
    threat: str = ""
    #: 95 % interval half-width over the seeds (None from one seed)
    half_width: float | None = None
    #: the no-information level it must beat (None: none is defined for its metric)
    reference: float | None = None
    #: what ``reference`` is: ``mean image`` or ``prior draw``
    reference_kind: str = "mean image"
    #: the scale axes' point (``batch=16``), empty without axes
    scale: str = ""
    #: share of the victims whose client guard refused the attacked model (None: no guard ran)
    refused: float | None = None
    #: mean SSIM of the images of the victims no guard refused (leakage when undetected; None: no guard
    #: ran, or every victim refused)
    undetected: float | None = None
    #: the highest seed's value (None from one seed): a bimodal outcome the interval cannot resolve
    worst: float | None = None

    @property
    def estimate(self) -> Estimate:
        return Estimate(self.ssim, self.half_width, self.seeds)

    @property
    def measurable(self) -> bool:
        """Whether this attack measurably beats its no-information level."""
        return self.reference is None or self.estimate.above(self.reference)

    @property
    def where(self) -> str:
        return f"{self.attack}@{self.round}" + (f" {self.scale}" if self.scale else "")


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
    #: the threat model the row is ranked under ("" : every attack)
    threat: str = ""
    #: 95 % interval half-width of the accuracy over seeds
    accuracy_half_width: float | None = None

    @property
    def leaks(self) -> bool:
        """Whether some attack measurably beats its no-information level."""
        return self.strongest is not None and self.strongest.measurable


def _finite(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def _score(record: CellRecord) -> tuple[float, str] | None:
    for metric in ("ssim", "class_ssim"):
        value = _finite(record.metrics.get(metric))
        if value is not None:
            return value, metric
    return None


def baselines(records: Sequence[CellRecord]) -> dict[str, float]:
    """The no-information SSIM per scale label (``""`` without axes; a batch's baseline serves every
    scale of that batch size)."""
    found: dict[str, list[float]] = defaultdict(list)
    for r in records:
        value = _finite(r.metrics.get("ssim"))
        if r.kind == "baseline" and r.status == "ok" and value is not None:
            found[r.scale or ""].append(value)
    return {k: sum(v) / len(v) for k, v in found.items()}


def _reference(
    base: dict[str, float], scale: str, metric: str, priors: list[float]
) -> tuple[float | None, str]:
    if metric != "ssim":
        return None, ""
    batch = next((part for part in scale.split() if part.startswith("batch=")), "")
    mean_image = base.get(scale, base.get(batch, base.get("")))
    if priors:
        prior = sum(priors) / len(priors)
        if mean_image is None or prior > mean_image:
            return prior, "prior draw"
    return mean_image, "mean image"


def undetected_ssim(cells: Sequence[CellRecord]) -> float | None:
    """Mean per-image SSIM over the victims of ``cells`` whose guard accepted the model (None when
    no guard ran or every victim refused): what an active attack leaks when it is not detected."""
    refused = [_finite(c.metrics.get("refused")) for c in cells]
    if all(r is None for r in refused):
        return None
    if all(r == 0 for r in refused):  # nothing caught: every victim's images count
        values = [float(c.metrics["ssim"]) for c in cells if _finite(c.metrics.get("ssim")) is not None]
    else:
        values = [v for c in cells for victim in c.victims if not victim.get("refused")
                  for v in (victim.get("ssim") or []) if _finite(v) is not None]  # fmt: skip
    return _mean(values)


def attack_scores(
    records: Sequence[CellRecord], threat: str | None = None
) -> dict[tuple[str, str], list[AttackScore]]:
    """(model, defense) → the seed statistics of every (attack, round, scale) that ran successfully
    (only the attacks of ``threat`` when given)."""
    groups: dict[tuple, list[CellRecord]] = defaultdict(list)
    for r in records:
        if r.kind != "attack" or r.status != "ok" or r.model is None or r.defense is None or r.attack is None:
            continue
        if _score(r) is None or (threat is not None and threat_of(r) != threat):
            continue
        groups[(r.model, r.defense, r.attack, int(r.round or 0), r.scale or "")].append(r)
    base = baselines(records)
    out: dict[tuple[str, str], list[AttackScore]] = defaultdict(list)
    for (model, defense, attack, round_, scale), cells in sorted(groups.items()):
        scored = [_score(c) for c in cells]
        values = [s[0] for s in scored if s is not None]
        metric = scored[0][1] if scored[0] is not None else "ssim"
        psnrs = [p for p in (_finite(c.metrics.get("psnr")) for c in cells) if p is not None]
        priors = [p for p in (_finite(c.metrics.get("prior_ssim")) for c in cells) if p is not None]
        refused = [p for p in (_finite(c.metrics.get("refused")) for c in cells) if p is not None]
        reference, kind = _reference(base, scale, metric, priors)
        stats = estimate(values)
        out[(model, defense)].append(
            AttackScore(
                attack=attack, round=round_, ssim=stats.mean, psnr=sum(psnrs) / len(psnrs) if psnrs else None,
                seeds=len(values), metric=metric, threat=threat_of(cells[0]), half_width=stats.half_width,
                reference=reference, reference_kind=kind, scale=scale,
                refused=sum(refused) / len(refused) if refused else None, undetected=undetected_ssim(cells),
                worst=max(values) if len(values) > 1 else None,
            )
        )  # fmt: skip
    return out


def strongest(scores: Sequence[AttackScore]) -> tuple[AttackScore | None, tuple[str, ...]]:
    """The strongest of ``scores`` — measurable leaks first, then the highest SSIM, PSNR, name — and
    the attacks tied with it on SSIM."""
    if not scores:
        return None, ()

    def key(s: AttackScore) -> tuple:
        psnr = s.psnr if s.psnr is not None else -math.inf
        return (not s.measurable, -level(s.ssim), -psnr, s.attack, s.round, s.scale)

    best = min(scores, key=key)
    same = [
        s
        for s in scores
        if s is not best and level(s.ssim) == level(best.ssim) and s.measurable == best.measurable
    ]
    return best, tuple(sorted({s.where for s in same}))


def threats(records: Sequence[CellRecord]) -> list[str]:
    """The threat models the run's attack cells ran under, honest-but-curious first."""
    found = {threat_of(r) for r in records if r.kind == "attack" and r.status == "ok"}
    return sorted(found, key=lambda t: (not t.startswith("honest"), "secure" in t, t))


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def standings(records: Sequence[CellRecord], threat: str | None = None) -> list[Standing]:
    """Every (model, defense) with its strongest attack (of ``threat`` when given), utility (seed means;
    ADR against ``none``), ε, cost (client seconds per update relative to ``none``) and failed cells;
    ranked, front marked."""
    scores = attack_scores(records, threat)
    keys = sorted(
        {(r.model, r.defense) for r in records if r.kind in ("attack", "utility") and r.model and r.defense}
    )
    utility: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r.kind == "utility" and r.status == "ok" and r.model and r.defense:
            for name in ("accuracy", "epsilon", "client_seconds"):
                value = _finite(r.metrics.get(name))
                if value is not None:
                    utility[(r.model, r.defense)][name].append(value)
    failed: dict[tuple[str, str], list[str]] = defaultdict(list)
    for r in records:
        if (
            r.status != "ok"
            and r.model
            and r.defense
            and (threat is None or r.kind != "attack" or threat_of(r) == threat)
        ):
            failed[(r.model, r.defense)].append(f"{r.kind}:{r.attack or '-'}@{r.round}")
    rows = []
    for model, defense in keys:
        util = utility.get((model, defense), {})
        clean = _mean(utility.get((model, "none"), {}).get("accuracy", []))
        accuracies = util.get("accuracy", [])
        acc = estimate(accuracies) if accuracies else None
        seconds, base_seconds = (
            _mean(util.get("client_seconds", [])),
            _mean(utility.get((model, "none"), {}).get("client_seconds", [])),
        )
        best, tied = strongest(scores.get((model, defense), []))
        rows.append(
            Standing(
                model=model, defense=defense, strongest=best, tied=tied,
                scores=tuple(scores.get((model, defense), [])),
                accuracy=acc.mean if acc else None, accuracy_half_width=acc.half_width if acc else None,
                adr=(clean - acc.mean) / clean if clean and acc is not None else None,
                epsilon=_mean(util.get("epsilon", [])),
                cost=seconds / base_seconds if seconds is not None and base_seconds else None,
                failed=tuple(sorted(failed.get((model, defense), []))), threat=threat or "",
            )
        )  # fmt: skip
    return rank(mark_pareto(rows))


def _privacy(row: Standing) -> float:
    """Lower is more private; every defense without measurable leakage is equally private."""
    assert row.strongest is not None
    return level(row.strongest.ssim) if row.leaks else -1.0


def dominates(a: Standing, b: Standing) -> bool:
    """``a`` is at least as private and as accurate as ``b``, better in one."""
    if a.strongest is None or b.strongest is None or a.accuracy is None or b.accuracy is None:
        return False
    pa, pb = _privacy(a), _privacy(b)
    return pa <= pb and a.accuracy >= b.accuracy and (pa < pb or a.accuracy > b.accuracy)


def mark_pareto(rows: list[Standing]) -> list[Standing]:
    """Mark the rows no other row of the same model dominates (identical points are both on the front);
    rows without a strongest attack or an accuracy are off the front."""
    out = []
    for row in rows:
        placed = row.strongest is not None and row.accuracy is not None
        beaten = any(dominates(o, row) for o in rows if o is not row and o.model == row.model)
        out.append(dataclasses.replace(row, pareto=placed and not beaten))
    return out


def _ties(leader: Standing, row: Standing) -> bool:
    if not leader.leaks and not row.leaks:
        return True
    if leader.leaks != row.leaks:
        return False
    a, b = leader.strongest, row.strongest
    assert a is not None and b is not None
    if a.half_width is None and b.half_width is None:  # one seed: exact ties only
        same_accuracy = level(leader.accuracy or -1.0) == level(row.accuracy or -1.0)
        return level(a.ssim) == level(b.ssim) and same_accuracy
    return a.estimate.overlaps(b.estimate)


def rank(rows: list[Standing]) -> list[Standing]:
    """Order by model, then privacy (no measurable leakage first, then strongest SSIM ascending), ties by
    accuracy (higher first) then name. A row shares the rank of its tie group's first row (see the
    module docstring). Unranked rows go last."""

    def key(row: Standing) -> tuple:
        if row.strongest is None:
            return (row.model, 1, 0.0, 0.0, row.defense)
        return (
            row.model,
            0,
            _privacy(row),
            -(row.accuracy if row.accuracy is not None else -1.0),
            row.defense,
        )

    out: list[Standing] = []
    leader: Standing | None = None
    for row in sorted(rows, key=key):
        if row.strongest is None:
            out.append(row)
            continue
        position = 1 + sum(1 for o in out if o.model == row.model and o.rank is not None)
        if leader is not None and leader.model == row.model and _ties(leader, row):
            number = leader.rank
        else:
            number, leader = position, None
        placed = dataclasses.replace(row, rank=number)
        leader = leader or placed
        out.append(placed)
    return out
