"""Defenses at equal cost: strength ladders, each defense at the rung that spends an accuracy budget, and
the positive control that keeps a table whose attack leaks nothing from ranking anything."""

from __future__ import annotations

import numpy as np
import pytest

from leakshield.errors import ConfigError
from leakshield.experiment.store import CellRecord
from leakshield.leaderboard import error_rates as er
from leakshield.leaderboard.budget_tables import budget_table
from leakshield.leaderboard.budgets import accuracy_costs, family, fits, rung_text, within_budget
from leakshield.leaderboard.presets import leaderboard_data, load_leaderboard
from leakshield.leaderboard.ranking import standings
from leakshield.leaderboard.strengths import spread
from leakshield.leaderboard.tables import ATTACK_TOO_WEAK, rank_text, threat_tables

#: no defense's test accuracy per utility seed (it varies; costs are paired by seed)
CLEAN = {0: 0.90, 1: 0.86, 2: 0.93}
#: a synthetic defense's rungs: (share of victims protected, accuracy cost in points per utility seed)
TOY = {
    "toy@s=0": (1.0, (0.1, 0.1, 0.1)),  # hides every victim, cheaply: the budget is not spent on it
    "toy": (0.0, (0.2, 0.2, 0.2)),
    "toy@s=1": (0.5, (0.8, 0.8, 0.8)),
    "toy@s=2": (0.8, (1.8, 1.8, 1.8)),
    "toy@s=3": (1.0, (4.0, 4.0, 4.0)),
    "toy@s=4": (1.0, (50.0, 50.0, 50.0)),  # below the utility gate's floor: does not train
    "other": (1.0, (3.0, 3.0, 3.0)),  # a second defense: fits 5 points only
    "wobbly": (1.0, (0.0, 0.2, 1.6)),  # mean 0.6 points, but its upper bound is 2.1 points
}


def _utility(defense: str, seed: int, accuracy: float) -> CellRecord:
    metrics = {"accuracy": accuracy, "chance": 0.1}
    return CellRecord(f"utility/{defense}/{seed}", "utility", "m", defense, None, 20, seed, "ok", metrics, [],
                      None, None, 0.0, 0.0)  # fmt: skip


@pytest.fixture(scope="module")
def toy_table() -> tuple[list, list[CellRecord]]:
    rows = [er.Row("none"), *(er.Row(name, protection=p) for name, (p, _) in TOY.items())]
    table = er.simulate_table(rows, np.random.default_rng(5), pool=400)
    records = list(table.records) + [_utility("none", s, a) for s, a in CLEAN.items()]
    for name, (_, costs) in TOY.items():
        records += [_utility(name, s, CLEAN[s] - c / 100) for s, c in zip(CLEAN, costs, strict=True)]
    return standings(records, er.TABLE_THREAT), records


def test_rung_labels_name_their_defense_and_strength() -> None:
    assert (
        family("gaussian-noise@sigma=0.1") == "gaussian-noise"
        and family("dp-fedavg-local") == "dp-fedavg-local"
    )
    assert rung_text("gaussian-noise@sigma=0.1") == "sigma=0.1" and rung_text("none") == "default"


def test_the_budget_table_picks_the_rung_that_spends_the_budget_and_ranks_them(toy_table) -> None:
    """The known curve: 1 point → rung 1, 2 → rung 2, 5 → rung 3 (rung 4 does not train); the second
    defense only at 5 points; a rung whose mean fits but whose bound does not is left out and said."""
    rows, records = toy_table
    costs = accuracy_costs(records)
    assert costs[("m", "toy@s=2")].mean == pytest.approx(0.018) and costs[("m", "none")].bound() == 0.0
    assert costs[("m", "wobbly")].mean == pytest.approx(0.006) and costs[("m", "wobbly")].bound() > 0.02
    chosen = {}
    for budget, expected in ((1.0, "toy@s=1"), (2.0, "toy@s=2"), (5.0, "toy@s=3")):
        choice = within_budget(rows, costs, budget)
        names = [r.defense for r in choice.rows]
        assert expected in names and not {"toy", "toy@s=0", "toy@s=4"} & set(names), (budget, names)
        assert ("wobbly" in names) == (budget == 5.0)  # its bound (2.1 points) fits 5 points only
        chosen[budget] = choice
    assert "other" in chosen[1.0].none_fit and "other" in chosen[2.0].none_fit
    assert "other" in [r.defense for r in chosen[5.0].rows]
    assert "wobbly" in chosen[1.0].uncertain
    at_five = chosen[5.0].rows  # ranked by the second-version rule: the protected rows first, none last
    assert at_five[-1].defense == "none" and [r.rank for r in at_five] == [1, 2, 3, 4]
    assert at_five[0].versus_none is not None and at_five[0].versus_none.less
    table = budget_table(er.TABLE_THREAT, rows, records)
    assert table is not None and "No rung fits 1 point: other" in table.note
    assert [row[0] for row in table.rows].count("≤ 1 pts") == len(chosen[1.0].rows)


def test_a_cost_fits_only_within_the_budget() -> None:
    from leakshield.leaderboard.budgets import Cost

    assert fits(Cost(0.005, 0.009, 3), 1.0) and not fits(Cost(0.005, 0.011, 3), 1.0)
    assert fits(Cost(0.02, None, 1), 2.0) and not fits(None, 5.0)


def test_a_costs_bound_is_printed_rounded_up_so_a_rung_left_out_never_reads_within_the_budget() -> None:
    from leakshield.leaderboard.budgets import Cost

    assert Cost(0.015, 0.0204, 3).text() == "+1.5 pts (≤ 2.1, 3 seeds)"  # left out of 2 points: not "≤ 2.0"
    assert not fits(Cost(0.015, 0.0204, 3), 2.0)
    assert Cost(0.015, 0.02, 3).text() == "+1.5 pts (≤ 2.0, 3 seeds)" and fits(Cost(0.015, 0.02, 3), 2.0)
    assert Cost(-0.004, -0.0012, 3).text() == "−0.4 pts (≤ −0.1, 3 seeds)"
    assert Cost(0.0, 0.0, 3).text() == "+0.0 pts (≤ 0.0, 3 seeds)"
    assert Cost(-0.0003, -0.0001, 3).text() == "−0.0 pts (≤ 0.0, 3 seeds)"
    one_seed = Cost(0.0204, None, 1)  # the mean is what the budget sees: rounded up too
    assert one_seed.text() == "+2.1 pts (1 seed, no bound)" and not fits(one_seed, 2.0)
    assert Cost(0.02 + 5e-13, 0.02 + 5e-13, 3).text().endswith("(≤ 2.0, 3 seeds)")  # noise: fits, prints 2.0


def test_a_table_whose_attack_does_not_leak_no_defense_ranks_nothing() -> None:
    """Every attack reconstructs the guess (protection 1 on no defense): no row is ranked, compared or on
    the front, the rank column and the note say why, and no budget table is made."""
    rows = [er.Row("none", protection=1.0), er.Row("dp-sgd", protection=1.0), er.Row("mixup", protection=0.5)]
    table = er.simulate_table(rows, np.random.default_rng(1), pool=400)
    assert all(s.rank is None and s.versus_none is None and not s.pareto for s in table.standings)
    assert all(rank_text(s) == ATTACK_TOO_WEAK for s in table.standings)
    (found,) = threat_tables(table.records)
    assert "ranks nothing" in found.note and all(row[0] == ATTACK_TOO_WEAK for row in found.rows)
    assert budget_table(er.TABLE_THREAT, table.standings, table.records) is None
    leaking = er.simulate_table([er.Row("none"), *rows[1:]], np.random.default_rng(1), pool=400)
    assert {s.defense: s.rank for s in leaking.standings}["dp-sgd"] == 1  # the same table with a leak ranks


def test_below_six_seeds_the_control_checks_the_leak_alone() -> None:
    """Below 6 seeds the test cannot establish a leak (an exact attack's p is at least 1/4 at 2 seeds; a
    t-test at 1 degree of freedom needs t > 15.9): the control passes on the leak alone; from 6 seeds the
    test decides; an attack that leaks no victim fails at any number of seeds."""
    from leakshield.leaderboard.controls import Control

    exact = Control("dager@0", 2, 1.0, 0.25, True)
    assert exact.passes and not exact.testable and exact.seeds_needed == 6 and "below 6 seeds" in exact.text()
    assert Control("ig@0", 2, 0.4, 0.25, True).passes and not Control("ig@0", 6, 0.4, 0.25, True).passes
    assert Control("dlg@0", 8, 1.0, 1 / 256, True).passes
    assert not Control("dlg@0", 8, 0.1, 0.3, True).passes
    assert not Control("hitaj@0", 2, 0.3, 0.25, False).passes
    rows = [er.Row("none", protection=1.0), er.Row("dp-sgd", protection=1.0)]
    quiet = er.simulate_table(rows, np.random.default_rng(4), seeds=2, pool=400)
    assert all(s.rank is None for s in quiet.standings)
    loud = er.simulate_table([er.Row("none"), rows[1]], np.random.default_rng(4), seeds=2, pool=400)
    assert [s.rank for s in loud.standings] == [1, 2]


#: tables per rate below (one row each: about 0.07 s a table)
CONTROL_TABLES = 300


def test_the_positive_control_neither_passes_a_guess_nor_misses_a_leak() -> None:
    """Null: the undefended row's attack reconstructs each victim at its own guess, with references near
    0.65 so guesses cross SSIM 0.6 and only the test over seeds can refuse them — it passes in ≤ 0.05 of
    tables (0.03 at 200). Effect: the standard export's level (0.75) passes in ≥ 0.9 (0.98 at 200)."""
    events = {"pass": er.control_passes}
    guess = [er.Row("none", protection=1.0)]
    null = er.measure(guess, events, CONTROL_TABLES, seed=3, reference=(0.65, 0.05), pool=400)
    effect = er.measure([er.Row("none")], events, CONTROL_TABLES, seed=3, pool=400)
    assert null.rate("pass") <= 0.05
    assert effect.rate("pass") >= 0.9


def test_presets_run_the_rungs_they_ask_for() -> None:
    assert (
        spread(1, 4) == [3]
        and spread(2, 4) == [0, 3]
        and spread(3, 4) == [0, 2, 3]
        and spread(9, 3) == [0, 1, 2]
    )
    labels = [d.display for d in load_leaderboard("quick").defenses]
    assert labels[labels.index("gaussian-noise") + 1 : labels.index("gaussian-noise") + 4] == [
        "gaussian-noise@sigma=0.01", "gaussian-noise@sigma=0.1", "gaussian-noise@sigma=1"]  # fmt: skip
    rung = next(d for d in load_leaderboard("quick").defenses if d.display == "dp-sgd@noise_multiplier=0.1")
    assert rung.entries[0]["params"]["noise_multiplier"] == 0.1 and rung.training is not None


def _file(rungs: object, strengths: object) -> dict:
    return {"base": {"seeds": [0], "defenses": ["none", {"name": "gaussian-noise", "sigma": 0.001}],
                     "attacks": ["ig"]},
            "strengths": strengths, "presets": {"p": {"rungs": rungs}}}  # fmt: skip


@pytest.mark.parametrize(
    ("rungs", "strengths", "message"),
    [
        ({"noise": 2}, {"gaussian-noise": {"sigma": [0.001, 0.1]}}, "no ladder for ['noise']"),
        (2, {"gaussian-noise": {"sigma": 0.1}}, "expected a list of 2 or more"),
        (2, {"gaussian-noise": {"bound": [1, 2]}}, "has no parameter 'bound'"),
        ({"dp-sgd": 2}, {"dp-sgd": {"noise_multiplier": [1, 2]}}, "name no row"),
        (-1, {"gaussian-noise": {"sigma": [0.001, 0.1]}}, "0 or more"),
        (2, {"gaussian-noise": {"sigma": ["a lot", 0.1]}}, "is not a number"),
        ("two", {"gaussian-noise": {"sigma": [0.001, 0.1]}}, "expected a number of rungs"),
    ],
)
def test_ladder_errors_name_the_field(rungs: object, strengths: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        leaderboard_data(_file(rungs, strengths), "p")


def test_rungs_meet_the_attacks_their_row_meets_and_labels_keep_the_mark_for_rungs() -> None:
    data = _file(2, {"gaussian-noise": {"sigma": ["1e-3", 0.1, 1.0]}})  # YAML reads 1e-3 as a string
    data["base"]["attacks"] = ["ig", {"name": "dlg", "against": ["gaussian-noise"]}]
    found = leaderboard_data(data, "p")
    labels = [d if isinstance(d, str) else d.get("label") for d in found["defenses"]]
    assert labels == ["none", None, "gaussian-noise@sigma=0.1", "gaussian-noise@sigma=1"]  # 1e-3 is the row
    assert found["attacks"][1]["against"] == [
        "gaussian-noise",
        "gaussian-noise@sigma=0.1",
        "gaussian-noise@sigma=1",
    ]
    data["base"]["defenses"].append({"name": "pruning", "label": "prune@0.9"})
    with pytest.raises(ConfigError, match="marks a strength rung"):
        leaderboard_data(data, "p")
    full = load_leaderboard("full")
    carlini = next(a for a in full.attacks if a.name == "carlini")
    assert {"mixup@k=2", "instahide@k=6"} <= set(carlini.against or ())
