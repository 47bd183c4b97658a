"""Stage 2 of the leaderboard and what it stands on: victims drawn per seed (disjoint from stage 1's
within a seed), the rerun's config cut from its source grid, the chosen cells per threat table, tables
by configured aggregate and guards gated on their refusals of honest models."""

from __future__ import annotations

import dataclasses

import pytest

from leakshield.data import load_dataset
from leakshield.errors import ConfigError
from leakshield.experiment.cells import expand_grid
from leakshield.experiment.config import parse_config
from leakshield.experiment.victims import draw_victims
from leakshield.leaderboard.export import Scenario
from leakshield.leaderboard.ranking import standings
from leakshield.leaderboard.stage_two import Rerun, chosen_cells, rerun_config, stage_two_victims
from leakshield.leaderboard.tables import ranking_rows
from leakshield.leaderboard.threats import HONEST, threat_of

from helpers import leaderboard_cell as cell
from helpers import tiny_config, watchdog


def _images(batches) -> list[bytes]:
    return [b.x.numpy().tobytes() for b in batches]


def test_victims_follow_the_seed_and_stage_two_skips_stage_ones() -> None:
    data = load_dataset("digits", {"channels": 1, "size": 8})
    clients = [data.train]
    fixed = parse_config(tiny_config(victims={"count": 2, "batch_size": 1}))
    per_seed = parse_config(tiny_config(victims={"count": 2, "batch_size": 1, "per_seed": True}))
    later = parse_config(tiny_config(victims={"count": 16, "batch_size": 1, "per_seed": True, "offset": 2}))
    # without per_seed the seed is ignored: the old behaviour, the same two images for every seed
    assert _images(draw_victims(fixed, clients, seed=0)) == _images(draw_victims(fixed, clients, seed=5))
    seed0 = _images(draw_victims(per_seed, clients, seed=0))
    assert seed0 != _images(draw_victims(per_seed, clients, seed=1))
    again = draw_victims(later, clients, seed=0)
    assert len(again) == 16 and not set(seed0) & set(_images(again))  # disjoint within the seed
    whole = parse_config(tiny_config(victims={"count": 18, "batch_size": 1, "per_seed": True}))
    assert _images(draw_victims(whole, clients, seed=0)) == seed0 + _images(again)  # one order, continued
    with pytest.raises(Exception, match="skipped"):
        far = tiny_config(victims={"count": 2, "per_seed": True, "offset": 10_000})
        draw_victims(parse_config(far), clients)


def test_per_seed_victims_have_a_baseline_per_seed() -> None:
    grid = expand_grid(parse_config(tiny_config(seeds=[0, 1], victims={"count": 1, "per_seed": True})))
    assert sorted(c.seed for c in grid if c.kind == "baseline") == [0, 1]
    shared = expand_grid(parse_config(tiny_config(seeds=[0, 1])))
    assert [c.seed for c in shared if c.kind == "baseline"] == [None]


def test_a_rerun_is_its_source_grid_cut_to_one_cell() -> None:
    source = parse_config(tiny_config(
        seeds=[0, 1], defenses=["none", {"name": "pruning", "ratio": 0.9}],
        attacks=[{"name": "ig", "iterations": 20}, {"name": "dlg", "iterations": 5}],
        attack={"rounds": [0, 2], "update": {"algorithm": "fedsgd"}},
        axes={"batch_size": [1, 2]}, victims={"count": 2, "per_seed": True}))  # fmt: skip
    rerun = Rerun(None, "lenet", "pruning", "dlg", 2, "batch=2", 16, 2)
    config = rerun_config(source, rerun)
    assert [d.display for d in config.defenses] == ["pruning"]
    assert [a.display for a in config.attacks] == ["dlg"]
    assert config.attack.rounds == [2] and config.axes.batch_size == [2] and config.utility.rounds == 0
    assert (config.victims.count, config.victims.per_seed, config.victims.offset) == (16, True, 2)
    assert config.seeds == [0, 1] and config.attacks[0].params == {"iterations": 5}
    attacks = [c for c in expand_grid(config) if c.kind == "attack"]
    assert len(attacks) == 2 and {c.seed for c in attacks} == {0, 1}
    with pytest.raises(ConfigError, match="not in the grid"):
        rerun_config(source, dataclasses.replace(rerun, defense="mixup"))
    assert stage_two_victims({"presets": {"p": {"stage2": {"victims": 4}}}}, "p") == 4
    assert stage_two_victims({"presets": {"p": {}}}, "p") == 16
    with pytest.raises(ConfigError, match="stage2"):
        stage_two_victims({"presets": {"p": {"stage2": {"victims": "many"}}}}, "p")


def test_each_tables_choice_is_rerun_once_and_a_participants_attack_never() -> None:
    records = [cell("baseline", None, victims=[0.3, 0.3]),
               *(cell("attack", "d", "ig", seed=s, victims=[0.9, 0.9]) for s in range(2)),
               *(cell("attack", "d", "dlg", seed=s, victims=[0.4, 0.4]) for s in range(2)),
               *(cell("attack", "d", "hitaj", seed=s, class_ssim=0.7) for s in range(2))]  # fmt: skip
    scenario = Scenario("later", "t", True, [cell("attack", "d", "ig", round=20, victims=[0.95, 0.95])])
    config = parse_config(tiny_config(victims={"count": 2}))
    found = chosen_cells(records, [scenario], {None: config, "later": config}, 16)
    assert [(r.source, r.attack, r.round, r.victims, r.offset) for r in found] == [("later", "ig", 20, 16, 2)]


def test_a_cell_stays_in_its_configured_table_whatever_its_guard_did() -> None:
    threat = {"adversary": "observing-server", "aggregated": True, "aggregate_size": 4}
    refused = dataclasses.replace(cell("attack", "g", "ig", ssim=0.4, aggregate_clients=0.0), threat=threat)
    assert threat_of(refused) == f"{HONEST} under secure aggregation"
    scaled = dataclasses.replace(refused, threat={**threat, "aggregate_size": None}, scale="clients=4")
    assert threat_of(scaled) == f"{HONEST} under secure aggregation"
    single = dataclasses.replace(refused, scale="clients=1")
    assert threat_of(single) == HONEST
    old = dataclasses.replace(refused, threat={"adversary": "observing-server", "aggregated": True})
    assert threat_of(old) == HONEST  # a store without the configured size: the measured aggregate


def test_a_guard_is_gated_on_the_honest_models_it_refuses() -> None:
    records = [cell("baseline", None, victims=[0.3]),
               *(cell(kind, d, "ig", victims=[0.9]) for d in ("strict", "lenient") for kind in ("attack",)),
               cell("detection", "strict", fpr=0.75, models_honest=4.0),
               cell("detection", "lenient", fpr=0.25, models_honest=4.0)]  # fmt: skip
    rows = {r.defense: r for r in standings(records)}
    assert rows["strict"].refuses_honest == 0.75 and not rows["strict"].trains and rows["strict"].rank is None
    assert rows["lenient"].trains and rows["lenient"].rank == 1
    _, body = ranking_rows([rows["lenient"], rows["strict"]], active=False)
    assert body[1][0] == "refuses honest models" and body[0][9] == "refuses 25% of honest models"


def test_a_deadline_that_passes_leaves_the_later_reruns_unstarted_with_workers(tmp_path) -> None:
    """With workers, a rerun is handed to a process only when one is free and the deadline has not
    passed: here the deadline passes as the first rerun finishes, so only the two first reruns run (the
    old loop handed all six to the pool at once, before any deadline could pass)."""
    from leakshield.leaderboard.stage_two import run_reruns

    from helpers import marked_rerun

    jobs = [(str(tmp_path), i) for i in range(6)]
    with watchdog(120):
        results, stopped = run_reruns(jobs, 2, progress=False, task=marked_rerun,
                                      keep_going=lambda: not any(tmp_path.iterdir()))  # fmt: skip
    assert stopped and results == [(1, 0, 0)] * 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0", "1"]
    done, stopped = run_reruns(jobs[:3], 2, progress=False, task=marked_rerun)  # no deadline: all run
    assert done == [(1, 0, 0)] * 3 and not stopped
