"""The leaderboard's ranking, one per threat model: a defense's privacy against an adversary is its
privacy under the *strongest* attack that adversary can run, over every attack and attacked model state.

The unit is the seed (:mod:`.leak_rate`): a victim leaks when its SSIM is ≥ 0.6 and above its own
no-information score (:mod:`.outcomes`); a cell's leak rate has an interval with seeds as clusters.
A defense leaks *measurably* when some (attack, round, scale) cell of it leaked a victim in some seed;
defenses without measurable leakage tie at the top. **The strongest attack is chosen fairly**: on half
of the seeds (the first, third, … in seed order) by leak rate, then SSIM, and its numbers are reported
on the other half, so the maximum over a row's K cells does not inflate what is shown (with one seed
there is no other half: chosen and reported on the same seed, said in the table). Leaking defenses are
ordered by the reported leak rate, then SSIM, and compared with the group's leader by a paired t-test
over the reported seeds' leak rates, Holm-corrected over the rows compared; the rows before the first
one shown different share the leader's rank, and the next group starts there (from one reported seed:
exact ties only). **Utility gate**: a defense whose
accuracy is below chance + ½ (undefended − chance) "does not train at this budget": it is shown, never
ranked on privacy nor placed on the front. Failed cells never count as a defense's success: they are
listed, and a defense whose attack cells all failed is unranked."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from leakshield.experiment.store import CellRecord
from leakshield.leaderboard.intervals import PRECISION, Estimate, estimate, level
from leakshield.leaderboard.leak_rate import LeakRate, holm, leak_rate, paired_p_value
from leakshield.leaderboard.outcomes import (
    SeedOutcome,
    baseline_images,
    baselines,
    cell_score,
    finite,
    for_scale,
    outcome,
)
from leakshield.leaderboard.threats import threat_of

__all__ = ["PRECISION", "AttackScore", "Standing", "baselines", "level", "rank", "standings", "strongest",
           "threats"]  # fmt: skip


@dataclass(frozen=True)
class AttackScore:
    """One attack on one model state (and scale) of one defense, over the seeds of ``outcomes``."""

    attack: str
    round: int
    ssim: float
    psnr: float | None
    seeds: int
    metric: str = "ssim"
    #: to whom it leaks (the stored threat model's practitioner wording)
    threat: str = ""
    #: 95 % interval half-width of the mean SSIM over the seeds (None from one seed)
    half_width: float | None = None
    #: the no-information level (mean over victims) it is shown against (None: none for its metric)
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
    #: each seed's cell: its score and leaked victims
    outcomes: tuple[SeedOutcome, ...] = ()

    @property
    def estimate(self) -> Estimate:
        return Estimate(self.ssim, self.half_width, self.seeds)

    @functools.cached_property
    def leak(self) -> LeakRate:
        """Leaked victims per seed and the rate's interval (seeds as clusters), computed once."""
        o = self.outcomes
        return leak_rate([x.seed for x in o], [x.leaked for x in o], [x.victims for x in o])

    @property
    def from_cell_means(self) -> bool:
        """Whether some seed's leaks were counted from the cell's mean (an export without per-victim
        scores) rather than from each victim."""
        return not all(o.per_victim for o in self.outcomes)

    @property
    def measurable(self) -> bool:
        """Whether some victim leaked in some seed of this score (scores without outcomes: the mean's
        interval above the no-information level)."""
        if self.outcomes:
            return self.leak.measurable
        return self.reference is None or self.estimate.above(self.reference)

    @property
    def where(self) -> str:
        return f"{self.attack}@{self.round}" + (f" {self.scale}" if self.scale else "")

    def on(self, seeds: Sequence[int]) -> AttackScore:
        """This score recomputed on ``seeds`` only (its guard figures kept)."""
        kept = tuple(o for o in self.outcomes if o.seed in set(seeds))
        if not kept:  # no cell of those seeds succeeded: nothing to report there
            return dataclasses.replace(self, outcomes=(), seeds=0, half_width=None, worst=None)
        return dataclasses.replace(self, outcomes=kept, **_seed_statistics(kept))


def _seed_statistics(outcomes: Sequence[SeedOutcome]) -> dict:
    values = [o.score for o in outcomes]
    stats = estimate(values)
    psnrs = [o.psnr for o in outcomes if o.psnr is not None]
    return {"ssim": stats.mean, "half_width": stats.half_width, "seeds": len(values),
            "psnr": sum(psnrs) / len(psnrs) if psnrs else None,
            "worst": max(values) if len(values) > 1 else None}  # fmt: skip


@dataclass(frozen=True)
class Standing:
    """A defense's row: its strongest attack reported on the held-out seeds (None if no attack cell
    succeeded), the attacks tied with it where it was chosen, every attack score, its utility (ε per
    record: ``epsilon``, DP-SGD; per client: ``epsilon_client``, DP-FedAvg), and the failed cells."""

    model: str
    defense: str
    strongest: AttackScore | None
    tied: tuple[str, ...]
    scores: tuple[AttackScore, ...]
    accuracy: float | None = None
    adr: float | None = None
    epsilon: float | None = None
    epsilon_client: float | None = None
    cost: float | None = None
    failed: tuple[str, ...] = ()
    pareto: bool = False
    rank: int | None = None
    #: the threat model the row is ranked under ("" : every attack)
    threat: str = ""
    #: 95 % interval half-width of the accuracy over seeds
    accuracy_half_width: float | None = None
    #: the seeds the strongest attack was chosen on (empty: chosen and reported on the same seeds)
    chosen_on: tuple[int, ...] = ()
    #: the accuracy below which the defense does not train (None: no undefended accuracy to gate by)
    floor: float | None = None
    #: a fitted defense's gap to its convergence criterion (None: met, or nothing fitted)
    under_budget: str | None = None

    @property
    def leaks(self) -> bool:
        """Whether some attack cell leaked a victim in some seed (all seeds, every cell)."""
        return any(s.measurable for s in self.scores)

    @property
    def trains(self) -> bool:
        """Whether the accuracy reaches the floor (unknown accuracy or floor: not gated)."""
        return self.floor is None or self.accuracy is None or self.accuracy >= self.floor

    @property
    def seeds_leaking(self) -> tuple[int, int]:
        """(seeds in which some attack cell leaked a victim, seeds with a successful attack cell)."""
        seeds = {o.seed for s in self.scores for o in s.outcomes}
        return len({o.seed for s in self.scores for o in s.outcomes if o.leaked}), len(seeds)

    @property
    def cells(self) -> int:
        """K: the (attack, round, scale) cells the strongest attack was selected from."""
        return len(self.scores)


def undetected_ssim(cells: Sequence[CellRecord]) -> float | None:
    """Mean per-image SSIM over the victims of ``cells`` whose guard accepted the model (None when
    no guard ran or every victim refused): what an active attack leaks when it is not detected."""
    refused = [finite(c.metrics.get("refused")) for c in cells]
    if all(r is None for r in refused):
        return None
    if all(r == 0 for r in refused):  # nothing caught: every victim's images count
        values = [float(c.metrics["ssim"]) for c in cells if finite(c.metrics.get("ssim")) is not None]
    else:
        values = [v for c in cells for victim in c.victims if not victim.get("refused")
                  for v in (victim.get("ssim") or []) if finite(v) is not None]  # fmt: skip
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
        if cell_score(r) is None or (threat is not None and threat_of(r) != threat):
            continue
        groups[(r.model, r.defense, r.attack, int(r.round or 0), r.scale or "")].append(r)
    per_image, means = baseline_images(records), baselines(records)
    out: dict[tuple[str, str], list[AttackScore]] = defaultdict(list)
    for (model, defense, attack, round_, scale), cells in sorted(groups.items()):
        found = tuple(sorted((outcome(c, per_image, means) for c in cells), key=lambda o: o.seed))
        metric = (cell_score(cells[0]) or (0.0, "ssim"))[1]
        priors = [p for p in (finite(c.metrics.get("prior_ssim")) for c in cells) if p is not None]
        refused = [p for p in (finite(c.metrics.get("refused")) for c in cells) if p is not None]
        mean_image, prior = for_scale(means, scale), _mean(priors)
        above = prior is not None and (mean_image is None or prior > mean_image)  # type: ignore[operator]
        kind = "prior draw" if above else "mean image"
        reference = None if metric != "ssim" else (prior if kind == "prior draw" else mean_image)
        out[(model, defense)].append(
            AttackScore(
                attack=attack, round=round_, metric=metric, threat=threat_of(cells[0]),
                reference=reference, reference_kind=kind, scale=scale,
                refused=sum(refused) / len(refused) if refused else None, undetected=undetected_ssim(cells),
                outcomes=found, **_seed_statistics(found),
            )
        )  # fmt: skip
    return out


def split_seeds(scores: Sequence[AttackScore]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(seeds the strongest attack is chosen on, seeds it is reported on): alternate seeds in order;
    with one seed, that seed for both."""
    seeds = sorted({o.seed for s in scores for o in s.outcomes})
    if len(seeds) < 2:
        return tuple(seeds), tuple(seeds)
    return tuple(seeds[0::2]), tuple(seeds[1::2])


def _strength(s: AttackScore) -> tuple:
    psnr = s.psnr if s.psnr is not None else -math.inf
    rate = s.leak.rate if s.outcomes else 0.0
    return (not s.measurable, -round(rate, 6), -level(s.ssim), -psnr, s.attack, s.round, s.scale)


def strongest(
    scores: Sequence[AttackScore],
    fair: bool = True,
    split: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
) -> tuple[AttackScore | None, tuple[str, ...], tuple[int, ...]]:
    """The strongest of ``scores`` — measurable leaks first, then the highest leak rate, SSIM, PSNR,
    name — chosen on half of the seeds and returned on the other half (``fair``; ``split``: the
    table's (chosen, reported) seeds, by default this row's), the attacks tied with it where it was
    chosen, and the seeds it was chosen on (empty: chosen on the seeds it is reported on — one seed, or
    no cell with outcomes on both halves)."""
    if not scores:
        return None, (), ()
    chosen_on, reported = (split or split_seeds(scores)) if fair else ((), ())

    def ran_on(score: AttackScore, seeds: Sequence[int]) -> bool:
        return any(o.seed in seeds for o in score.outcomes)

    both = [s for s in scores if ran_on(s, chosen_on) and ran_on(s, reported)]
    held_out = bool(chosen_on) and chosen_on != reported and bool(both)
    pool = [s.on(chosen_on) for s in both] if held_out else list(scores)
    best = min(pool, key=_strength)
    tied = tuple(sorted({s.where for s in pool if s is not best and _strength(s)[:3] == _strength(best)[:3]}))
    if not held_out:
        return best, tied, ()
    return next(s for s in both if s.where == best.where).on(reported), tied, chosen_on


def threats(records: Sequence[CellRecord]) -> list[str]:
    """The threat models the run's attack cells ran under, honest-but-curious first."""
    found = {threat_of(r) for r in records if r.kind == "attack" and r.status == "ok"}
    return sorted(found, key=lambda t: (not t.startswith("honest"), "secure" in t, t))


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def standings(records: Sequence[CellRecord], threat: str | None = None) -> list[Standing]:
    """Every (model, defense) with its strongest attack (of ``threat`` when given), utility (seed means;
    ADR against ``none``; the utility gate's floor), ε, cost (client seconds per update relative to
    ``none``) and failed cells; ranked, front marked."""
    scores = attack_scores(records, threat)
    split = split_seeds([s for found in scores.values() for s in found])  # one split for the table
    keys = sorted(
        {(r.model, r.defense) for r in records if r.kind in ("attack", "utility") and r.model and r.defense}
    )
    utility: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    budget: dict[tuple[str, str], str | None] = {}
    for r in records:
        if r.kind == "utility" and r.status == "ok" and r.model and r.defense:
            for name in ("accuracy", "epsilon", "epsilon_client", "client_seconds", "chance"):
                value = finite(r.metrics.get(name))
                if value is not None:
                    utility[(r.model, r.defense)][name].append(value)
            budget[(r.model, r.defense)] = budget.get((r.model, r.defense)) or r.metrics.get("under_budget")
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
        undefended = utility.get((model, "none"), {})
        clean = _mean(undefended.get("accuracy", []))
        accuracies = util.get("accuracy", [])
        acc = estimate(accuracies) if accuracies else None
        seconds = _mean(util.get("client_seconds", []))
        base_seconds = _mean(undefended.get("client_seconds", []))
        chance = _mean(undefended.get("chance", [])) or 0.0
        best, tied, chosen_on = strongest(scores.get((model, defense), []), split=split)
        rows.append(
            Standing(
                model=model, defense=defense, strongest=best, tied=tied, chosen_on=chosen_on,
                scores=tuple(scores.get((model, defense), [])),
                accuracy=acc.mean if acc else None, accuracy_half_width=acc.half_width if acc else None,
                adr=(clean - acc.mean) / clean if clean and acc is not None else None,
                epsilon=_mean(util.get("epsilon", [])), epsilon_client=_mean(util.get("epsilon_client", [])),
                cost=seconds / base_seconds if seconds is not None and base_seconds else None,
                failed=tuple(sorted(failed.get((model, defense), []))), threat=threat or "",
                floor=None if clean is None else chance + 0.5 * (clean - chance),
                under_budget=budget.get((model, defense)),
            )
        )  # fmt: skip
    return rank(mark_pareto(rows))


def _privacy(row: Standing) -> tuple[float, float]:
    """Lower is more private: (-1, -1) without measurable leakage, else (leak rate, SSIM) reported."""
    assert row.strongest is not None
    if not row.leaks:
        return (-1.0, -1.0)
    rate = row.strongest.leak.rate if row.strongest.outcomes else 1.0
    return (round(rate, 6), level(row.strongest.ssim))


def dominates(a: Standing, b: Standing) -> bool:
    """``a`` is at least as private and as accurate as ``b``, better in one."""
    if a.strongest is None or b.strongest is None or a.accuracy is None or b.accuracy is None:
        return False
    pa, pb = _privacy(a), _privacy(b)
    return pa <= pb and a.accuracy >= b.accuracy and (pa < pb or a.accuracy > b.accuracy)


def mark_pareto(rows: list[Standing]) -> list[Standing]:
    """Mark the rows no other row of the same model dominates (identical points are both on the front);
    rows without a strongest attack or an accuracy, and rows that do not train, are off the front."""
    placed = [r for r in rows if r.strongest is not None and r.accuracy is not None and r.trains]
    out = []
    for row in rows:
        beaten = any(dominates(o, row) for o in placed if o is not row and o.model == row.model)
        out.append(dataclasses.replace(row, pareto=row in placed and not beaten))
    return out


def _seed_rates(row: Standing, seeds: Sequence[int]) -> list[float]:
    assert row.strongest is not None
    rates = row.strongest.leak.per_seed()
    return [rates[s] for s in seeds]


def _differ(leader: Standing, rows: Sequence[Standing]) -> list[bool]:
    """Which ``rows`` are shown less private than ``leader``: paired t-tests over their common reported
    seeds, Holm-corrected; with fewer than two common seeds, any difference in privacy."""
    p_values = []
    for row in rows:
        assert leader.strongest is not None and row.strongest is not None
        common = sorted(set(leader.strongest.leak.per_seed()) & set(row.strongest.leak.per_seed()))
        if len(common) < 2:  # nothing to test: exact ties in privacy only
            p_values.append(1.0 if _privacy(leader) == _privacy(row) else 0.0)
        else:
            p_values.append(paired_p_value(_seed_rates(row, common), _seed_rates(leader, common)))
    return holm(p_values)


def rank(rows: list[Standing]) -> list[Standing]:
    """Per model: rows without measurable leakage share rank 1; leaking rows follow by (reported leak
    rate, SSIM, accuracy, name) in groups that share their first row's rank (see the module
    docstring). Rows that do not train and rows without an attack score are unranked and last."""

    def key(row: Standing) -> tuple:
        return (*_privacy(row), -(row.accuracy if row.accuracy is not None else -1.0), row.defense)

    out: list[Standing] = []
    for model in sorted({r.model for r in rows}):
        mine = [r for r in rows if r.model == model]
        ranked = sorted((r for r in mine if r.strongest is not None and r.trains), key=key)
        clean = [dataclasses.replace(r, rank=1) for r in ranked if not r.leaks]
        out += clean
        waiting, position = [r for r in ranked if r.leaks], len(clean) + 1
        while waiting:
            leader, others = waiting[0], waiting[1:]
            differs = _differ(leader, others)
            run = next((i for i, d in enumerate(differs) if d), len(others))  # rows before the first apart
            group = [leader, *others[:run]]
            out += [dataclasses.replace(r, rank=position) for r in group]
            position += len(group)
            waiting = others[run:]
        out += sorted((r for r in mine if r.strongest is not None and not r.trains), key=key)
        out += [r for r in mine if r.strongest is None]
    return out
