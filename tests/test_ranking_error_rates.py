"""The ranking's error rates and power, measured by simulated tables run through the real ranking code
(:mod:`leakshield.leaderboard.error_rates`): stage-1 cells, each row's chosen cell rerun on fresh victims
drawn per seed by the experiment's own draw, per-seed baselines, secure-aggregation cells whose guard
refused some seeds. Each check here fails under one of the mutants the rule must not admit: the p = 0
branch for differences equal in every seed, tables assigned by outcome, victims fixed across seeds, the
multiplicity correction dropped (measured: see the closing note of issue 82 and docs/leaderboard.md).

Rates at α 0.02 (``python benchmarks/ranking_error_rates.py --tables 300``: 0.053 against no defense,
0.067 over pairs; without Holm's correction 0.33 and 0.95). Here, 150 seeded tables.
"""

from __future__ import annotations

import numpy as np
import pytest

from leakshield.leaderboard import error_rates as er
from leakshield.leaderboard.comparisons import letter_display, paired_p, sign_flip_p, versus_reference
from leakshield.leaderboard.ranking import standings

from helpers import leaderboard_cell as cell

NULL_TABLES = 150
POWER_TABLES = 60


#: a pool of distinct images, as the rule assumes (the protocol's own pool of 20 sensitive images is
#: measured in benchmarks/ranking_error_rates.py: its victims repeat across seeds, see the docs)
LARGE_POOL = 400


def test_no_false_separation_under_a_null_tables_by_design_and_victims_by_seed() -> None:
    """Under 20 identical rows: family-wise error against no defense ≤ 0.05 and over all pairs ≤ 0.10
    at these 150 tables (at 300 others: 0.053 and 0.067, at the bound; dropping Holm's correction makes
    them 0.33 and 0.95). Every row keeps its 8 seeds in the secure-aggregation table although its guard
    refused the model in some (an outcome-based table moves those cells out), shows stage 2's numbers,
    and its stage-2 victims are new images in each seed (fixed victims: the same 16 in every seed)."""
    events = {"versus none": er.false_versus_none, "pairs": er.false_pairs,
              "every seed kept": lambda t: all(len(s.strongest.outcomes) == 8 for s in t.standings),
              "stage 2": lambda t: all(s.stage_two for s in t.standings),
              "fresh victims": lambda t: min(len(v) for v in t.images.values()) > 64}  # fmt: skip
    rates = er.measure(er.null_rows(20), events, NULL_TABLES, seed=1, pool=LARGE_POOL)
    assert rates.rate("versus none") <= 0.05
    assert rates.rate("pairs") <= 0.10
    assert rates.rate("every seed kept") == 1.0 and rates.rate("stage 2") == 1.0
    assert rates.rate("fresh victims") == 1.0


def test_a_defense_that_hides_every_victim_is_shown_to_leak_less_than_none() -> None:
    """Power at 8 seeds × 16 fresh victims among 20 rows: full protection (DP-SGD) against no defense is
    found in ≥ 0.8 of tables (0.953 at 300 tables)."""
    rows = [er.Row("none"), er.Row("dp-sgd", protection=1.0), *(er.Row(f"same-{i}") for i in range(18))]
    def less(table: er.Table) -> bool:  # a table whose positive control fails compares nothing
        found = next(s for s in table.standings if s.defense == "dp-sgd").versus_none
        return found is not None and found.less

    events = {"less": less}
    assert er.measure(rows, events, POWER_TABLES, seed=2, pool=LARGE_POOL).rate("less") >= 0.8


def test_a_difference_equal_in_every_seed_gets_the_exact_sign_flip_p_not_zero() -> None:
    """Through the real ranking: no defense leaks each victim at 1.0 against a reference of 0.4, 19
    defenses hide every victim — the difference is −0.6 in each of 8 seeds. Its p is 1/256, above
    α / 19 (Holm's first step), so no row is separated; a p of 0 would separate all 19."""
    records = [cell("baseline", None, victims=[0.4, 0.4])]
    for seed in range(8):
        records.append(cell("attack", "none", "ig", seed=seed, victims=[1.0, 1.0]))
        records += [cell("attack", f"d{i}", "ig", seed=seed, victims=[0.4, 0.4]) for i in range(19)]
    rows = [s for s in standings(records) if s.defense != "none"]
    assert [s.versus_none.p for s in rows] == pytest.approx([1 / 256] * 19)
    assert not any(s.versus_none.less for s in rows)
    assert [s.versus_none.mean for s in rows] == pytest.approx([-0.6] * 19)


def test_the_p_values_and_the_letters() -> None:
    assert sign_flip_p([1, 1, 1, 1], one_sided=False) == pytest.approx(2 / 16)
    assert sign_flip_p([-1, -1, -1, -1], one_sided=True) == pytest.approx(1 / 16)
    assert paired_p([0, 0, 0], [1, 1, 1], one_sided=True) == pytest.approx(1 / 8)
    assert paired_p([1, 1], [1, 1], one_sided=True) == 1.0 and paired_p([0.0], [1.0], one_sided=True) == 1.0
    from scipy import stats

    a, b = [0.1, 0.3, 0.2, 0.4], [0.5, 0.4, 0.6, 0.9]
    assert paired_p(a, b, one_sided=True) == pytest.approx(stats.ttest_rel(a, b, alternative="less").pvalue)
    found = versus_reference([{0: 0.0, 1: 0.1, 2: 0.0}], {0: 0.5, 1: 0.7, 2: 0.6})
    assert found[0].less and found[0].high < 0 and found[0].p == pytest.approx(0.00172, abs=1e-5)
    # rows 0–1 and 1–2 not separated, 0–2 separated: a, ab, b
    assert letter_display(3, {(0, 2)}) == ["a", "ab", "b"]
    assert letter_display(4, set()) == ["a"] * 4
    assert letter_display(3, {(0, 1), (0, 2), (1, 2)}) == ["a", "b", "c"]


def test_the_leak_interval_is_monotone_in_the_count() -> None:
    from leakshield.leaderboard.leak_rate import leak_interval

    for rho in (None, 0.0, 0.3):
        bounds = [leak_interval([k] + [0] * 7, [16] * 8, rho) for k in range(17)]
        lows, highs = [b[0] for b in bounds], [b[1] for b in bounds]
        assert lows == sorted(lows) and highs == sorted(highs)
        assert all(0.0 <= lo <= hi <= 1.0 for lo, hi in bounds)


def test_bounded_intervals_stay_inside_zero_and_one() -> None:
    from leakshield.leaderboard.margin import bounded_mean
    from leakshield.leaderboard.ranking import accuracy_interval

    wide = bounded_mean([0.0, 0.9])
    assert wide.low == 0.0 and wide.high == 1.0
    same = accuracy_interval([0.967, 0.967, 0.967], 359)  # "± 0.000" before: the test set's error now
    assert same.low < 0.967 < same.high and same.high - same.low > 0.02
    assert np.isclose(accuracy_interval([0.967] * 3, None).low, 0.967)
