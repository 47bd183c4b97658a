"""The power of the leaderboard's leakage rule, analytic and by Monte Carlo simulation.

A model of a defense's outcomes has a seed-level random effect: each seed *fails* (every victim leaked)
with probability ``seed_failure``, and otherwise each victim leaks on its own with probability
``victim_rate``. A victim that does not leak is reconstructed at its no-information level (its SSIM is
the reference plus noise). The rule of :mod:`.leak_rate` flags a defense when some victim leaks, so at S
seeds of V victims it flags with probability 1 − (1 − f)^S (1 − r)^(S·V); the simulation checks the
implementation against that value, and the interval's coverage of the true rate
r + f − r·f. ``leakshield leaderboard`` states these rates at its own seeds and victims.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from leakshield.experiment.store import CellRecord
from leakshield.leaderboard.leak_rate import (
    LEAK_SSIM,
    IntervalRule,
    clustered_interval,
    leak_rate,
)


@dataclass(frozen=True)
class LeakModel:
    """A defense's true behaviour: victims leaking on their own, seeds failing as a whole."""

    name: str
    victim_rate: float = 0.0
    seed_failure: float = 0.0

    @property
    def true_rate(self) -> float:
        return self.victim_rate + self.seed_failure - self.victim_rate * self.seed_failure


#: the cases the rule must tell apart (the second is DCS² under the malicious server in wave 3)
MODELS = (
    LeakModel("5 % of victims leaked", victim_rate=0.05),
    LeakModel("a seed in three fails", seed_failure=1 / 3),
    LeakModel("everything at the no-information level"),
)


#: the simulated no-information level: references N(mean, sd), a non-leaked reconstruction's noise sd
REFERENCE = (0.40, 0.03)
NOISE = 0.05


def false_leak_probability(reference: tuple[float, float] = REFERENCE, noise: float = NOISE) -> float:
    """The chance that a victim reconstructed at its no-information level still reads as leaked
    (its SSIM, the reference plus noise, reaches :data:`LEAK_SSIM`)."""
    from scipy.stats import norm

    return float(norm.sf((LEAK_SSIM - reference[0]) / math.hypot(reference[1], noise)))


def analytic_flag_rate(model: LeakModel, seeds: int, victims: int) -> float:
    """The probability that some victim of ``seeds`` × ``victims`` reads as leaked under ``model``
    (true leaks, and the simulated no-information level's rare false ones)."""
    stays = (1 - model.victim_rate) * (1 - false_leak_probability())
    return 1.0 - (1 - model.seed_failure) ** seeds * stays ** (seeds * victims)


@dataclass(frozen=True)
class Simulated:
    """A Monte Carlo estimate: how often the rule flagged, how often the interval held the true rate."""

    flag_rate: float
    coverage: float
    repetitions: int


def _cell(kind: str, seed: int | None, ssims: Sequence[float]) -> CellRecord:
    rows = [{"ssim": [float(v)]} for v in ssims]
    metrics = {"ssim": float(np.mean(ssims)), "images": float(len(ssims))}
    attack = "ig" if kind == "attack" else None
    return CellRecord(f"{kind}/{seed}", kind, "m" if attack else None, "d" if attack else None, attack,
                      0 if attack else None, seed, "ok", metrics, rows, None, None, 0.0, 0.0)  # fmt: skip


def simulate(
    model: LeakModel,
    seeds: int,
    victims: int,
    repetitions: int = 2000,
    seed: int = 0,
    interval: IntervalRule = clustered_interval,
    reference: tuple[float, float] = REFERENCE,
    noise: float = NOISE,
) -> Simulated:
    """Run the leaderboard's own path (stored cells → per-victim outcomes → leak rate) on
    ``repetitions`` simulated leaderboards of ``seeds`` × ``victims`` under ``model``: each victim's
    reference drawn N(``reference``) once (the same victims in every seed), a non-leaked reconstruction
    at its reference + N(0, ``noise``), a leaked one at SSIM 0.95 ± 0.03; ``interval`` replaces the
    leaderboard's interval (to show what a worse one does)."""
    from leakshield.leaderboard.ranking import attack_scores

    rng = np.random.default_rng(seed)
    flagged = covered = 0
    for _ in range(repetitions):
        refs = rng.normal(*reference, size=victims)
        records = [_cell("baseline", None, refs)]
        for s in range(seeds):
            truly = (rng.random(victims) < model.victim_rate) | (rng.random() < model.seed_failure)
            ssims = np.where(truly, rng.normal(0.95, 0.03, victims), refs + rng.normal(0.0, noise, victims))
            records.append(_cell("attack", s, ssims))
        ((score,),) = attack_scores(records).values()
        found = score.outcomes
        rate = leak_rate(
            [o.seed for o in found], [o.leaked for o in found], [o.victims for o in found], interval
        )
        flagged += rate.measurable
        covered += rate.low <= model.true_rate <= rate.high
    return Simulated(flagged / repetitions, covered / repetitions, repetitions)


def power_sentence(seeds: int, victims: int) -> str:
    """The rule's flag rates at ``seeds`` × ``victims`` per attack cell, in words (for the results page)."""
    leaky, failing, _ = MODELS
    return (
        f"Power at {seeds} seed(s) × {victims} victim(s) per attack cell: a cell whose attack leaks 5 % of "
        f"victims is flagged with probability {analytic_flag_rate(leaky, seeds, victims):.2f}, one whose "
        f"seeds fail one in three (every victim leaked) with probability "
        f'{analytic_flag_rate(failing, seeds, victims):.2f}; "no measurable leakage" misses them with '
        "the complements (a row with several cells has more chances to be flagged)."
    )
