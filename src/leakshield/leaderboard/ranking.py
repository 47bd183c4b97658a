"""The leaderboard's ranking, one per threat model: a defense's privacy against an adversary is its
privacy under the *strongest* attack that adversary can run, over every attack and attacked model state.

**Two stages.** Stage 1 is the grid (every attack × round × scale cell on every seed, a few victims
each): it only *chooses* each row's strongest cell — by leak rate over all seeds, then mean margin
(:mod:`.margin`), then name — and screens for any leak. Stage 2 reruns only that cell on the same seeds
with fresh victims drawn per seed (``stage`` 2 records); its numbers are the row's headline. A run
without stage 2 (an export made before it) reports the chosen cell's stage-1 numbers, said in the table.

**The comparisons** (:mod:`.comparisons`): each row against no defense of the same model — a one-sided
paired t-test over seeds on the per-seed mean margin, Holm-corrected over the table's rows, with the
difference and its simultaneous interval — and a compact letter display from all-pairs tests.
Rows are listed by mean margin. **Utility gate**: a defense whose accuracy is below chance + ½
(undefended − chance) "does not train at this budget"; a client guard, which has no accuracy of its
own, is gated on the share of honest models it refuses (more than half: "refuses honest models"). Gated
rows are shown, never compared nor placed on the front. Failed cells never count as a defense's
success: they are listed, and a defense whose attack cells all failed is unranked."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from leakshield.experiment.store import CellRecord
from leakshield.leaderboard.comparisons import Difference
from leakshield.leaderboard.controls import Control
from leakshield.leaderboard.intervals import PRECISION, Estimate, estimate, level
from leakshield.leaderboard.leak_rate import LeakRate, leak_interval, leak_rate, pooled_icc
from leakshield.leaderboard.margin import Bounded, bounded_mean
from leakshield.leaderboard.ordering import mark_pareto, rank
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

#: what a utility cell contributes to its row
UTILITY_METRICS = ("accuracy", "epsilon", "epsilon_client", "client_seconds", "chance", "test_examples")
#: a client guard that refuses more than this share of honest models does not pass the utility gate
GUARD_REFUSAL_GATE = 0.5


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
    #: each seed's cell: its score, margin and leaked victims
    outcomes: tuple[SeedOutcome, ...] = ()
    #: the table's pooled intraclass correlation of leaks within a seed (None: ρ = 1, seeds alone)
    rho: float | None = None

    @property
    def estimate(self) -> Estimate:
        return Estimate(self.ssim, self.half_width, self.seeds)

    @functools.cached_property
    def leak(self) -> LeakRate:
        """Leaked victims per seed and the rate's interval (Clopper–Pearson at n / deff, the table's ρ)."""
        o = self.outcomes
        rule = functools.partial(leak_interval, rho=self.rho)
        return leak_rate([x.seed for x in o], [x.leaked for x in o], [x.victims for x in o], rule)

    @property
    def margins(self) -> dict[int, float]:
        """Seed → the mean margin of its victims."""
        return {o.seed: o.margin for o in self.outcomes}

    @property
    def margin(self) -> Bounded | None:
        """The mean margin over seeds with its 95 % interval inside [0, 1] (None without outcomes)."""
        return bounded_mean(list(self.margins.values())) if self.outcomes else None

    @property
    def victims(self) -> int:
        """Victims scored over all seeds."""
        return sum(o.victims for o in self.outcomes)

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

    @property
    def place(self) -> tuple[str, int, str]:
        """(attack, round, scale): the cell's coordinates within its row."""
        return self.attack, self.round, self.scale


def _seed_statistics(outcomes: Sequence[SeedOutcome]) -> dict:
    values = [o.score for o in outcomes]
    stats = estimate(values)
    psnrs = [o.psnr for o in outcomes if o.psnr is not None]
    return {"ssim": stats.mean, "half_width": stats.half_width, "seeds": len(values),
            "psnr": sum(psnrs) / len(psnrs) if psnrs else None,
            "worst": max(values) if len(values) > 1 else None}  # fmt: skip


@dataclass(frozen=True)
class Standing:
    """A defense's row: its strongest attack (stage 2's fresh victims where they ran; None if no attack
    cell succeeded), the stage-1 cell it was chosen as and the attacks tied with it, every stage-1 attack
    score, its utility (ε per record: ``epsilon``, DP-SGD; per client: ``epsilon_client``, DP-FedAvg),
    the failed cells, and its comparisons (difference from no defense, letters)."""

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
    #: the row's place in its table's order (by mean margin), None when not compared
    rank: int | None = None
    #: the threat model the row is ranked under ("" : every attack)
    threat: str = ""
    #: the accuracy's 95 % interval (seeds and the test set's binomial error; inside [0, 1])
    accuracy_interval: Bounded | None = None
    #: the accuracy below which the defense does not train (None: no undefended accuracy to gate by)
    floor: float | None = None
    #: a fitted defense's gap to its convergence criterion (None: met, or nothing fitted)
    under_budget: str | None = None
    #: whether ``strongest`` comes from stage 2 (fresh victims per seed)
    stage_two: bool = False
    #: a client guard's share of honest models refused (its detection cells; None: no guard)
    refuses_honest: float | None = None
    #: the difference from no defense (None: the reference row itself, or no reference)
    versus_none: Difference | None = None
    #: the compact letters (rows sharing a letter were not shown different)
    letters: str = ""
    #: the table's positive control (its no-defense row's strongest attack against the guess; None:
    #: no such row, or fewer than two seeds), :mod:`.controls`
    control: Control | None = None

    @property
    def leaks(self) -> bool:
        """Whether some attack cell leaked a victim in some seed (all seeds, every cell, both stages)."""
        return any(s.measurable for s in self.scores) or bool(self.strongest and self.strongest.measurable)

    @property
    def trains(self) -> bool:
        """Whether the row passes the utility gate: accuracy at the floor, or a guard refusing at most
        :data:`GUARD_REFUSAL_GATE` of honest models (unknown: not gated)."""
        if self.accuracy is None and self.refuses_honest is not None:
            return self.refuses_honest <= GUARD_REFUSAL_GATE
        return self.floor is None or self.accuracy is None or self.accuracy >= self.floor

    @property
    def seeds_leaking(self) -> tuple[int, int]:
        """(seeds in which some stage-1 attack cell leaked a victim, seeds with a successful cell)."""
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
    records: Sequence[CellRecord], threat: str | None = None, stage: int = 1
) -> dict[tuple[str, str], list[AttackScore]]:
    """(model, defense) → the seed statistics of every (attack, round, scale) of ``stage`` that ran
    successfully (only the attacks of ``threat`` when given)."""
    groups: dict[tuple, list[CellRecord]] = defaultdict(list)
    for r in records:
        if r.kind != "attack" or r.status != "ok" or r.model is None or r.defense is None or r.attack is None:
            continue
        if r.stage != stage or cell_score(r) is None or (threat is not None and threat_of(r) != threat):
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


def _strength(s: AttackScore) -> tuple:
    """Stage 1's order: the highest leak rate over all seeds, then the highest mean margin, then name."""
    rate = s.leak.rate if s.outcomes else 0.0
    margin = s.margin.mean if s.margin is not None else -math.inf
    return (-round(rate, 6), -level(margin), s.attack, s.round, s.scale)


def strongest(scores: Sequence[AttackScore]) -> tuple[AttackScore | None, tuple[str, ...]]:
    """Stage 1's choice among ``scores`` on all their seeds — the highest leak rate, then mean margin,
    then name — and the cells tied with it on both."""
    if not scores:
        return None, ()
    best = min(scores, key=_strength)
    tied = tuple(sorted(s.where for s in scores if s is not best and _strength(s)[:2] == _strength(best)[:2]))
    return best, tied


def threats(records: Sequence[CellRecord]) -> list[str]:
    """The threat models the run's attack cells ran under, honest-but-curious first."""
    found = {threat_of(r) for r in records if r.kind == "attack" and r.status == "ok"}
    return sorted(found, key=lambda t: (not t.startswith("honest"), "secure" in t, t))


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def accuracy_interval(accuracies: Sequence[float], test_examples: float | None) -> Bounded:
    """The mean accuracy over seeds with a 95 % interval inside [0, 1]: the seeds' spread and, where the
    test set's size is recorded, its binomial error p(1 − p)/n (one test set for every seed)."""
    mean = sum(accuracies) / len(accuracies)
    binomial = mean * (1 - mean) / test_examples if test_examples else 0.0
    return bounded_mean(accuracies, binomial)


def honest_refusals(records: Sequence[CellRecord]) -> dict[tuple[str, str], float]:
    """(model, defense) → the share of honest models its client guard refused, pooled over its detection
    cells (``fpr`` weighted by ``models_honest``)."""
    found: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for r in records:
        fpr = finite(r.metrics.get("fpr"))
        if r.kind == "detection" and r.status == "ok" and r.model and r.defense and fpr is not None:
            found[(r.model, r.defense)].append((fpr, finite(r.metrics.get("models_honest")) or 1.0))
    return {k: sum(f * n for f, n in v) / sum(n for _, n in v) for k, v in found.items()}


def standings(records: Sequence[CellRecord], threat: str | None = None) -> list[Standing]:
    """Every (model, defense) with its strongest attack (of ``threat`` when given; stage 2's rerun where
    it ran), utility (seed means; ADR against ``none``; the utility gate's floor), ε, cost (client seconds
    per update relative to ``none``), a guard's refusals of honest models and the failed cells; compared
    with no defense and with each other, front marked (:mod:`.ordering`)."""
    scores, rerun = attack_scores(records, threat), attack_scores(records, threat, stage=2)
    keys = sorted(
        {(r.model, r.defense) for r in records if r.kind in ("attack", "utility") and r.model and r.defense}
    )
    utility: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    budget: dict[tuple[str, str], str | None] = {}
    for r in records:
        if r.kind == "utility" and r.status == "ok" and r.model and r.defense:
            for name in UTILITY_METRICS:
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
            failed[(r.model, r.defense)].append(f"{r.kind}:{r.attack or '-'}@{r.round}" + (
                " (stage 2)" if r.stage == 2 else ""))  # fmt: skip
    refusals = honest_refusals(records)
    chosen = {}
    for key in keys:
        best, tied = strongest(scores.get(key, []))
        again = next((s for s in rerun.get(key, []) if best is not None and s.place == best.place), None)
        chosen[key] = (again or best, tied, again is not None)
    rho = pooled_icc([([o.leaked for o in s.outcomes], [o.victims for o in s.outcomes])
                      for s, _, _ in chosen.values() if s is not None])  # fmt: skip
    rows = []
    for model, defense in keys:
        util = utility.get((model, defense), {})
        undefended = utility.get((model, "none"), {})
        clean = _mean(undefended.get("accuracy", []))
        accuracies = util.get("accuracy", [])
        acc = accuracy_interval(accuracies, _mean(util.get("test_examples", []))) if accuracies else None
        seconds = _mean(util.get("client_seconds", []))
        base_seconds = _mean(undefended.get("client_seconds", []))
        chance = _mean(undefended.get("chance", [])) or 0.0
        best, tied, stage_two = chosen[(model, defense)]
        rows.append(
            Standing(
                model=model, defense=defense, tied=tied, stage_two=stage_two,
                strongest=None if best is None else dataclasses.replace(best, rho=rho),
                scores=tuple(scores.get((model, defense), [])),
                accuracy=acc.mean if acc else None, accuracy_interval=acc,
                adr=(clean - acc.mean) / clean if clean and acc is not None else None,
                epsilon=_mean(util.get("epsilon", [])), epsilon_client=_mean(util.get("epsilon_client", [])),
                cost=seconds / base_seconds if seconds is not None and base_seconds else None,
                failed=tuple(sorted(failed.get((model, defense), []))), threat=threat or "",
                floor=None if clean is None else chance + 0.5 * (clean - chance),
                under_budget=budget.get((model, defense)), refuses_honest=refusals.get((model, defense)),
            )
        )  # fmt: skip
    return rank(mark_pareto(rows))
