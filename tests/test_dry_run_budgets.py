"""The dry run never runs a component at its full budget: a defense whose update cost grows with a
budget (DCS²'s synthesis steps) has its FL round timed at short values of it, and the fit probe
scales an attack's generator steps from their default and times its cell at short iterations (the full
preset's dry run spent minutes in DCS²'s 500-step syntheses and in GGL's 3,000-step generator)."""

from __future__ import annotations

import pytest

from leakshield.experiment.config import DefenseSetting
from leakshield.experiment.probe_budgets import scaled_defense, short_budget

from helpers import tiny_config


def test_a_defense_is_scaled_to_its_short_budget_keeping_label_training_and_stack() -> None:
    single = DefenseSetting.model_validate(
        {"name": "dcs2", "label": "d", "steps": 500, "lr": 0.2, "training": {"local_lr": 0.01}}
    )
    short, factor = scaled_defense(single, 1)
    assert (short.name, short.label, short.entries[0]["params"]) == ("dcs2", "d", {"steps": 5, "lr": 0.2})
    assert short.training == single.training and factor == pytest.approx(5 / 500)
    assert scaled_defense(single, 2)[0].entries[0]["params"]["steps"] == 10
    stack = DefenseSetting.model_validate(
        {"stack": [{"name": "dcs2"}, {"name": "gaussian-noise", "sigma": 0.1}]}
    )
    scaled, factor = scaled_defense(stack, 2)  # the default 500 steps, read from the defense
    assert [e["params"] for e in scaled.entries] == [{"steps": 10}, {"sigma": 0.1}]
    assert scaled_defense(DefenseSetting.model_validate({"name": "gaussian-noise"}), 1) is None
    assert scaled_defense(DefenseSetting.model_validate({"name": "dcs2", "steps": 3}), 2)[1] == 1.0


def test_a_dcs2_round_is_extrapolated_from_two_short_rounds(tmp_path, monkeypatch) -> None:
    """A deterministic clock: a round "takes" 1 s plus 10 ms per synthesis step; the probe, at 4 of 400
    steps and doublings until the difference is resolved (never past a quarter of the budget), recovers
    the round at 400 (5 s)."""
    from leakshield.experiment import ExperimentRunner, estimate, parse_config

    steps_seen: list[int] = []

    def fake_round(models, cell, defense):
        steps_seen.append(defense.entries[0]["params"]["steps"])
        return 1.0 + 0.01 * steps_seen[-1]

    monkeypatch.setattr(estimate, "_one_round", fake_round)
    monkeypatch.setattr(estimate, "_attack_time", lambda context, cell: 0.0)
    config = tiny_config(defenses=[{"name": "dcs2", "steps": 400}], utility={"rounds": 3})
    runner = ExperimentRunner(parse_config(config), tmp_path / "run", device="cpu", progress=False)
    found = estimate.estimate_grid(runner)
    assert steps_seen == [4, 4, 8, 16, 32, 64]  # a warm-up, k, then doublings: 60 steps add 0.6 s
    assert found.training == pytest.approx(3 * (1.0 + 0.01 * 400))


def test_the_real_dcs2_round_probe_never_synthesizes_at_the_configured_budget(tmp_path, monkeypatch) -> None:
    """Through the real code (the synthesis spied on): rounds synthesize at k and its doublings, never
    past a quarter of the budget; DCS²'s fit, which only measures, is not run; the run's artifact cache
    stays empty."""
    from leakshield.defenses import dcs2
    from leakshield.experiment import ExperimentRunner, estimate, parse_config

    steps_seen: list[int] = []
    real = dcs2._synthesizer

    def spy(params, *args, **kwargs):
        steps_seen.append(params.steps)
        return real(params, *args, **kwargs)

    monkeypatch.setattr(dcs2, "_synthesizer", spy)
    monkeypatch.setattr(dcs2, "PAPER_STEPS", 7)  # the fit's comparison budget (not under test): short
    monkeypatch.setattr(estimate, "_attack_time", lambda context, cell: 0.0)
    config = tiny_config(defenses=[{"name": "dcs2", "steps": 400, "fraction": 0.5}], utility={"rounds": 1})
    runner = ExperimentRunner(parse_config(config), tmp_path / "run", device="cpu", progress=False,
                              cache_dir=str(tmp_path / "cache"))  # fmt: skip
    found = estimate.estimate_grid(runner)
    k = short_budget(400)
    assert {k, 2 * k} <= set(steps_seen) and max(steps_seen) <= 100 and found.training > 0
    assert 7 not in steps_seen  # the fit that only measures (its comparison budget) is left out
    assert not list((tmp_path / "cache").rglob("*.safetensors"))


def test_the_fit_probe_scales_ggl_from_its_default_generator_steps_and_shortens_its_cells(
    monkeypatch,
) -> None:
    """The full preset leaves GGL's generator steps (3,000) and iterations (1,000) at their defaults:
    no probe runs either (a probe's iterations stop at a quarter of the budget)."""
    from leakshield.experiment import attack_probe
    from leakshield.experiment.config import parse_config
    from leakshield.leaderboard import fit_probe

    seen: list[dict] = []

    def fake_run_cell(context, cell):
        seen.append(context.config.create_attack(cell.attack).params.model_dump())

    monkeypatch.setattr(fit_probe, "run_cell", fake_run_cell)
    monkeypatch.setattr(attack_probe, "run_cell", fake_run_cell)
    config = parse_config(tiny_config(attacks=["ggl"], utility={"rounds": 0}))
    found = fit_probe.probe_fits(config, "cpu")
    assert set(found) == {"fit · ggl", "attack ggl (1 cells)"}
    assert {p["generator_steps"] for p in seen} == {fit_probe.PROBE_STEPS, 2 * fit_probe.PROBE_STEPS}
    iterations = [p["iterations"] for p in seen]
    assert short_budget(1000) in iterations and max(iterations) <= 250  # 2: the fit's own probe


def _clocked_probe(monkeypatch, attack: dict, defense: dict, cost) -> tuple[float, list[dict]]:
    """``probed_attack_time`` of one cell under a deterministic clock: a run "takes" ``cost(attack params,
    defense params)``; returns the estimate and the (attack, defense) parameters of every run."""
    import torch

    from leakshield.defenses import dcs2
    from leakshield.experiment import attack_probe
    from leakshield.experiment.cells import Cell
    from leakshield.experiment.config import Component, parse_config
    from leakshield.experiment.world import ExperimentContext

    runs: list[dict] = []

    def fake_run_cell(context, cell):
        runs.append({"attack": dict(cell.attack.params), "defense": cell.defense.entries[0]["params"]})

    def fake_timed(run):
        run()
        return cost(runs[-1]["attack"], runs[-1]["defense"])

    monkeypatch.setattr(attack_probe, "run_cell", fake_run_cell)
    monkeypatch.setattr(attack_probe, "timed", fake_timed)
    monkeypatch.setattr(dcs2, "PAPER_STEPS", 7)  # the fit's comparison budget (not under test): short
    config = parse_config(tiny_config(defenses=[defense], attacks=[attack]))
    context = ExperimentContext(config, torch.device("cpu"))
    cell = Cell("attack", config.models[0], config.defenses[0], Component(**attack), 0, 0)
    return attack_probe.probed_attack_time(context, cell), runs


def test_the_gan_attacks_final_steps_are_shortened_and_added_back(monkeypatch) -> None:
    """Hitaj et al.'s attack: 1 s of set-up, 0.5 s a round, 20 ms a final generator step; probed at 2 and
    4 of 30 rounds and at 3 of 300 final steps and doublings until resolved (48: 0.9 s more), it recovers
    1 + 15 + 6 = 22 s."""
    attack = {"name": "hitaj", "rounds": 30, "final_steps": 300}
    seconds, runs = _clocked_probe(
        monkeypatch, attack, {"name": "none"}, lambda a, d: 1.0 + 0.5 * a["rounds"] + 0.02 * a["final_steps"]
    )
    assert (
        max(r["attack"]["rounds"] for r in runs) == 4 and max(r["attack"]["final_steps"] for r in runs) == 48
    )
    assert seconds == pytest.approx(1.0 + 0.5 * 30 + 0.02 * 300)


def test_an_attack_on_dcs2_shortens_the_synthesis_that_makes_its_updates(monkeypatch) -> None:
    """IG against DCS² at 500 synthesis steps: 2 s of set-up, 10 ms an IG step, 30 ms a synthesis step;
    the synthesis is probed at 5 steps and doublings until resolved (40: 1.05 s more), and the estimate is
    2 + 10 + 15 = 27 s."""
    seconds, runs = _clocked_probe(monkeypatch, {"name": "ig", "iterations": 1000}, {"name": "dcs2"},
                                   lambda a, d: 2.0 + 0.01 * a["iterations"] + 0.03 * d["steps"])  # fmt: skip
    assert sorted({r["defense"]["steps"] for r in runs}) == [5, 10, 20, 40]
    assert seconds == pytest.approx(2.0 + 0.01 * 1000 + 0.03 * 500)


def test_a_probes_cache_leaves_out_the_fits_that_only_measure_and_scratch_restores_the_run(tmp_path) -> None:
    """DCS²'s fit only measures its budget: a probe's cache hands back an empty artifact without fitting;
    any other fit runs. ``scratch`` swaps the caches and forgets the probe's models and artifact records,
    also when the probe fails."""
    from types import SimpleNamespace

    from leakshield.artifacts import Artifact, ArtifactCache, FitKey
    from leakshield.experiment.probe_budgets import ProbeCache, scratch

    cache, fitted = ProbeCache(tmp_path / "probe"), []

    def fit():
        fitted.append(True)
        return Artifact({}, {"fitted": True})

    key = dict(params={}, scope="client", data="d", seed=0)
    assert cache.get_or_fit(FitKey(component="defense:dcs2", **key), fit).metadata == {} and not fitted
    assert cache.get_or_fit(FitKey(component="defense:loda", **key), fit).metadata == {"fitted": True}
    run_cache = ArtifactCache(tmp_path / "run")
    models = SimpleNamespace(cache=run_cache, _states={"kept": 1}, used=["kept"])
    context = SimpleNamespace(cache=run_cache, models=models)
    with pytest.raises(RuntimeError), scratch(context):
        assert isinstance(context.cache, ProbeCache) and models.cache is context.cache and not models._states
        models._states["probe"], models.used = 2, [*models.used, "probe"]
        raise RuntimeError("a failed probe")
    assert context.cache is run_cache and models.cache is run_cache
    assert models._states == {"kept": 1} and models.used == ["kept"]


def test_fits_and_the_path_calibration_happen_before_the_timed_runs(monkeypatch) -> None:
    """A run pays an attack's fit and the path calibration once, not per cell: the probe fits the attack
    before each timed run (its key holds the probe's budgets) and repeats, untimed, the first run long
    enough to calibrate (here 20 steps or more)."""
    from leakshield.experiment import attack_probe

    fits: list[int] = []
    monkeypatch.setattr(attack_probe, "fitted_attack", lambda context, cell, spec: fits.append(1))
    monkeypatch.setattr(attack_probe, "SMALL_JOB", 20)
    seconds, runs = _clocked_probe(monkeypatch, {"name": "ggl", "iterations": 1000}, {"name": "none"},
                                   lambda a, d: 1.0 + 0.001 * a["iterations"])  # fmt: skip
    budgets = [r["attack"]["iterations"] for r in runs]
    assert budgets[:2] == [5, 5] and budgets.count(20) == 2 and budgets.count(40) == 1
    assert len(fits) == len(runs) - 1  # every run but the untimed calibration one fits first
    assert seconds == pytest.approx(1.0 + 0.001 * 1000)
