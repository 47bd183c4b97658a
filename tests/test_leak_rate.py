"""The leaderboard's leakage rule and its power: per-victim leaks, the interval with seeds as clusters,
the paired test and Holm's correction, and a Monte Carlo check of the rule at the standard preset's
sample sizes — which a naive interval and the old seed-mean t-rule must fail."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from leakshield.leaderboard.intervals import estimate
from leakshield.leaderboard.leak_rate import (
    clopper_pearson,
    clustered_interval,
    design_effect,
    intraclass_correlation,
    leak_rate,
    victim_leaked,
    wald_interval,
)
from leakshield.leaderboard.power import MODELS, analytic_flag_rate, power_sentence, simulate
from leakshield.leaderboard.presets import load_leaderboard
from leakshield.leaderboard.ranking import attack_scores
from leakshield.leaderboard.tuning import tuning_config

from helpers import leaderboard_cell as cell

REPETITIONS = 1000
#: the interval's coverage may fall this far below its nominal 95 % (Monte Carlo spread at 1,000
#: repetitions is about 0.007; at 8 seeds × 2 victims and 2,000 repetitions the clustered interval
#: measured 0.983–0.995 on these models, Wald's 0.558 and 0.737: benchmarks/leak_rule_power.py)
COVERAGE_FLOOR = 0.93


def test_a_victim_leaks_at_ssim_0_6_and_above_its_own_reference() -> None:
    assert victim_leaked(0.6, 0.3) and victim_leaked(0.95, None)
    assert not victim_leaked(0.59, 0.1) and not victim_leaked(0.7, 0.7) and not victim_leaked(math.nan, 0.1)


def test_clopper_pearson_and_the_clustered_interval() -> None:
    low, high = clopper_pearson(0, 10)
    assert low == 0 and high == pytest.approx(1 - 0.025 ** (1 / 10))
    low, high = clopper_pearson(3, 10)
    assert (low, high) == pytest.approx((0.0667, 0.6525), abs=1e-4)
    # no leaked victim: ρ is undefined and taken as 1, so 8 seeds of 2 victims count as 8
    assert design_effect([0] * 8, [2] * 8) == 2.0
    assert clustered_interval([0] * 8, [2] * 8) == pytest.approx(clopper_pearson(0, 8))
    # whole seeds failing: ρ = 1; victims leaking independently of their seed: ρ near 0
    assert intraclass_correlation([2, 2, 0, 0], [2, 2, 2, 2]) == 1.0
    assert intraclass_correlation([1, 1, 1, 1], [2, 2, 2, 2]) == 0.0
    assert wald_interval([0] * 8, [2] * 8) == (0.0, 0.0)
    rate = leak_rate([1, 3], [2, 0], [2, 2])
    assert rate.rate == 0.5 and rate.seeds_leaking == 1 and rate.measurable
    assert rate.text() == "2/4 = 0.50 [0.01, 0.99]" and rate.seeds_text().startswith("1 of 2 [")


def _old_t_rule_flag_rate(seeds: int, victims: int, repetitions: int, seed: int = 0) -> float:
    """Wave 3's rule on the seed-failure model: seed means of SSIM, flagged when the whole 95 %
    t-interval lies above the no-information level (0.40)."""
    rng = np.random.default_rng(seed)
    flagged = 0
    for _ in range(repetitions):
        fails = rng.random(seeds) < 1 / 3
        means = [float(np.mean(rng.normal(0.95 if f else 0.40, 0.03, victims))) for f in fails]
        flagged += estimate(means).above(0.40)
    return flagged / repetitions


def power_failures(seeds: int, victims: int, interval=clustered_interval) -> list[str]:
    """What is wrong with the rule (using ``interval``) at ``seeds`` × ``victims``: Monte Carlo flag
    rates away from the analytic ones (4 standard errors), or coverage below :data:`COVERAGE_FLOOR`."""
    failures = []
    for i, model in enumerate(MODELS):
        found = simulate(model, seeds, victims, REPETITIONS, seed=i, interval=interval)
        expected = analytic_flag_rate(model, seeds, victims)
        spread = 4 * math.sqrt(max(expected * (1 - expected), 1e-4) / REPETITIONS)
        if abs(found.flag_rate - expected) > spread:
            failures.append(f"{model.name}: flags {found.flag_rate:.3f}, analytic {expected:.3f}")
        if found.coverage < COVERAGE_FLOOR:
            failures.append(f"{model.name}: coverage {found.coverage:.3f}")
    return failures


def test_the_rule_has_its_stated_power_at_the_standard_presets_sample_sizes() -> None:
    config = load_leaderboard("standard")
    seeds, victims = len(config.seeds), config.victims.count
    assert power_failures(seeds, victims) == []
    leaky, failing, flat = (analytic_flag_rate(m, seeds, victims) for m in MODELS)
    # the stated rates (docs/leaderboard.md): a seed failing one time in three is caught ≥ 95 % of the
    # time, a 5 % victim leak about half the time; the no-information level almost never
    assert failing >= 0.95 and 0.5 <= leaky < 0.6 and flat < 0.01


def test_the_results_page_states_the_power_of_its_own_export() -> None:
    """With per-victim scores the reading note gives the power at the export's seeds × victims; an
    export without them says its leaks come from cell means."""
    from leakshield.leaderboard.export import reading_note

    records = [cell("baseline", None, victims=[0.3, 0.3]),
               *(cell("attack", "d", "ig", seed=s, victims=[0.9, 0.2]) for s in range(8))]  # fmt: skip
    assert power_sentence(8, 2) in reading_note(records)
    old = [cell("baseline", None, ssim=0.3), cell("attack", "d", "ig", ssim=0.9)]
    assert "cell means" in reading_note(old) and "Power at" not in reading_note(old)


def test_a_naive_interval_fails_the_power_check() -> None:
    """Wald's interval gives [0, 0] for 0 of n and needs several leaks to leave 0: it misses the true
    rate (coverage about 0.56 for a 5 % leak) and flags far less often than a leak is present."""
    failures = power_failures(8, 2, interval=wald_interval)
    assert any("5 % of victims leaked: coverage" in f for f in failures)
    assert any("5 % of victims leaked: flags" in f for f in failures)


def test_the_old_seed_mean_t_rule_misses_seeds_that_fail_one_time_in_three() -> None:
    """At 8 seeds it needs 4 failing seeds to flag (about 0.26 of the time, against 0.96 for the leak
    count); at wave 3's 3 seeds two fully leaked seeds of three were 'no measurable leakage'."""
    old = _old_t_rule_flag_rate(8, 2, REPETITIONS)
    failing = analytic_flag_rate(MODELS[1], 8, 2)
    assert old < failing - 0.5
    assert not estimate([1.0, 1.0, 0.40]).above(0.40)


def _outcome(records):
    ((score,),) = attack_scores(records).values()
    return score.outcomes


def test_references_follow_the_scale_and_each_victim() -> None:
    """A cell at ``clients=1`` uses the unscaled baseline; one at ``batch=2 clients=4`` the baseline of
    its batch size; each image against its own reference (0.65 leaks against 0.3, not against 0.7)."""
    base = [cell("baseline", None, victims=[0.3, 0.7])]
    (found,) = _outcome([*base, cell("attack", "d", "ig", victims=[0.65, 0.65], scale="clients=1")])
    assert (found.leaked, found.victims, found.per_victim) == (1, 2, True)
    batch = replace(
        cell("baseline", None, scale="batch=2"), victims=[{"ssim": [0.7, 0.3]}], metrics={"ssim": 0.5}
    )
    scaled = replace(cell("attack", "d", "ig", scale="batch=2 clients=4", ssim=0.65),
                     victims=[{"ssim": [0.65, 0.65]}])  # fmt: skip
    (found,) = _outcome([*base, batch, scaled])
    assert (found.leaked, found.victims) == (1, 2)


def test_an_old_export_counts_cell_means_and_refused_victims_do_not_leak() -> None:
    """Without per-victim rows every image counts at the cell's mean against the baseline's mean; a
    refused victim's row holds the mean image's score, its own reference, so it never leaks."""
    (found,) = _outcome([cell("baseline", None, ssim=0.4), cell("attack", "d", "ig", ssim=0.9, images=2.0)])
    assert (found.leaked, found.victims, found.per_victim) == (2, 2, False)
    guarded = replace(cell("attack", "d", "imprint", ssim=0.65, refused=0.5),
                      victims=[{"ssim": [0.9]}, {"ssim": [0.4], "refused": "row-guard"}])  # fmt: skip
    (found,) = _outcome([cell("baseline", None, victims=[0.3, 0.4]), guarded])
    assert (found.leaked, found.victims) == (1, 2)


def test_class_level_scores_and_prior_draws() -> None:
    """A GAN attack's classes are its victims (0.6 and up leaks; a cell mean where rows are missing);
    GGL's victims are judged against their own prior draw, or the cell's mean draw in older stores."""
    classes = [{"class": 0, "class_ssim": 0.7}, {"class": 1, "class_ssim": 0.3}]
    gan = replace(cell("attack", "d", "hitaj", class_ssim=0.5), victims=classes)
    (found,) = _outcome([cell("baseline", None, victims=[0.3]), gan])
    assert (found.leaked, found.victims, found.reference) == (1, 2, None)
    (found,) = _outcome([cell("baseline", None, victims=[0.3]), cell("attack", "d", "hitaj", class_ssim=0.7)])
    assert (found.leaked, found.victims, found.per_victim) == (1, 1, False)
    base = cell("baseline", None, victims=[0.3, 0.3])
    draws = [{"ssim": [0.7], "prior_ssim": [0.8]}, {"ssim": [0.7], "prior_ssim": [0.6]}]
    own = replace(cell("attack", "d", "ggl", ssim=0.7, prior_ssim=0.7), victims=draws)
    assert _outcome([base, own])[0].leaked == 1
    older = replace(own, victims=[{"ssim": [0.7]}, {"ssim": [0.75]}])  # the cell's mean draw, 0.7
    assert _outcome([base, older])[0].leaked == 1


def test_the_standard_presets_learning_rate_sweep_still_builds() -> None:
    """--tune runs one seed: the preset's utility seeds must not outlive its seeds."""
    config = tuning_config(load_leaderboard("standard"))
    assert config.seeds == [0] and config.utility_seeds == [0]


def test_an_export_keeps_what_leaks_are_counted_from() -> None:
    """Every attack and baseline cell keeps its victims' SSIMs (and prior draws) through the export, so
    a rerender from it counts the same leaks as the run."""
    from leakshield.leaderboard.export import export_json, records_from_json

    draws = [{"ssim": [0.7], "prior_ssim": [0.8], "labels": [3]}, {"ssim": [0.7], "prior_ssim": [0.6]}]
    records = [cell("baseline", None, victims=[0.3, 0.3]),
               replace(cell("attack", "d", "ggl", ssim=0.7, prior_ssim=0.7), victims=draws)]  # fmt: skip
    _, back = records_from_json(export_json(records, {"name": "x"}))
    assert back[1].victims == [{"ssim": [0.7], "prior_ssim": [0.8]}, {"ssim": [0.7], "prior_ssim": [0.6]}]
    assert _outcome(back) == _outcome(records) and _outcome(back)[0].leaked == 1
