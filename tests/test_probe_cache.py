"""The dry run keeps its probe times (``dry-run-probes-*.json`` in the artifact cache) and a second dry
run reuses every probe whose code and settings are unchanged: an edit to one attack re-probes that
attack and nothing else; other execution settings, estimator code or thread counts are other keys or
files; a file measured on another machine, damaged, or of a failed probe is not trusted, and a cache
that cannot be written costs no estimate."""

from __future__ import annotations

import json

import pytest

from leakshield.experiment import ExperimentRunner, estimate, parse_config, probe_cache
from leakshield.experiment import stamps as stamps_module
from leakshield.experiment.probe_cache import (
    FIT_PROBES,
    GRID_PROBES,
    MOST_KEPT,
    KeptProbes,
    kept_path,
    probe_key,
)

from helpers import tiny_config, write_config

ATTACKS = [{"name": "ig", "iterations": 10}, {"name": "dlg", "iterations": 5}]


@pytest.fixture
def probes(monkeypatch):
    """The probes replaced by a recorder: (kind, attack) per probe run, fixed seconds."""
    calls: list[tuple[str, str | None]] = []

    def attack_time(context, cell):
        calls.append(("attack", cell.attack.name))
        return {"ig": 2.0, "dlg": 3.0}[cell.attack.name]

    monkeypatch.setattr(estimate, "_round_time", lambda context, cell: calls.append(("round", None)) or 0.5)
    monkeypatch.setattr(estimate, "_attack_time", attack_time)
    return calls


def _estimate(tmp_path, name: str, attacks=ATTACKS, cache: str = "cache", **changes):
    config = tiny_config(attacks=attacks, utility={"rounds": 2}, **changes)
    runner = ExperimentRunner(parse_config(config), tmp_path / name, device="cpu", progress=False,
                              cache_dir=str(tmp_path / cache))  # fmt: skip
    return estimate.estimate_grid(runner)


def test_a_second_dry_run_reuses_every_probe_with_the_same_estimate(tmp_path, probes) -> None:
    first = _estimate(tmp_path, "a")
    assert sorted(probes) == [("attack", "dlg"), ("attack", "ig"), ("round", None)]
    assert kept_path(tmp_path / "cache", GRID_PROBES, "cpu").is_file()
    probes.clear()
    again = _estimate(tmp_path, "b")  # another run directory, the same cache: nothing probed
    assert probes == []
    assert again.kinds == first.kinds and again.training == first.training


def test_an_edit_to_one_attacks_code_re_probes_that_attack_only(tmp_path, probes, monkeypatch) -> None:
    _estimate(tmp_path, "a")
    probes.clear()
    real = stamps_module.Stamper._component

    def edited(self, kind, name, roots, settings):  # IG's modules read as edited; nothing else
        found = real(self, kind, name, roots, settings)
        if kind == "attack" and name == "ig":
            found = stamps_module.ComponentCode(kind, name, {**found.modules, "edit": "x"}, found.settings)
        return found

    monkeypatch.setattr(stamps_module.Stamper, "_component", edited)
    _estimate(tmp_path, "b")
    assert probes == [("attack", "ig")]


def test_an_edit_to_the_shared_core_re_probes_everything(tmp_path, probes, monkeypatch) -> None:
    _estimate(tmp_path, "a")
    probes.clear()
    real = stamps_module.Stamper._component

    def edited(self, kind, name, roots, settings):
        found = real(self, kind, name, roots, settings)
        if kind == "core":
            found = stamps_module.ComponentCode(kind, name, {**found.modules, "edit": "x"}, found.settings)
        return found

    monkeypatch.setattr(stamps_module.Stamper, "_component", edited)
    _estimate(tmp_path, "b")
    assert sorted(probes) == [("attack", "dlg"), ("attack", "ig"), ("round", None)]


def test_a_file_from_another_machine_or_damaged_is_set_aside_and_rewritten(tmp_path, probes) -> None:
    _estimate(tmp_path, "a")
    path = kept_path(tmp_path / "cache", GRID_PROBES, "cpu")
    document = json.loads(path.read_text())
    document["machine"]["host"] = "another-host"
    path.write_text(json.dumps(document))
    probes.clear()
    _estimate(tmp_path, "b")
    assert len(probes) == 3  # measured elsewhere: every probe again
    assert json.loads(path.read_text())["machine"]["host"] != "another-host"  # rewritten for this one
    path.write_bytes(b"\x00{not json")
    kept = KeptProbes(path, "cpu")
    assert kept.times == {} and "damaged" in (kept.set_aside or "")
    probes.clear()
    _estimate(tmp_path, "c")
    assert len(probes) == 3 and json.loads(path.read_text())["version"] == 1
    for bad in ({"version": 1, "machine": kept.machine, "times": {"k": -1.0}},
                {"version": 1, "machine": kept.machine, "times": {"k": "3"}},
                {"version": 99, "machine": kept.machine, "times": {}}):  # fmt: skip
        path.write_text(json.dumps(bad))
        assert KeptProbes(path, "cpu").times == {}


def test_a_probe_that_failed_is_not_kept(tmp_path, monkeypatch) -> None:
    calls: list[str] = []

    def failing(context, cell):
        calls.append(cell.attack.name)
        raise RuntimeError("out of memory")

    monkeypatch.setattr(estimate, "_round_time", lambda context, cell: 0.5)
    monkeypatch.setattr(estimate, "_attack_time", failing)
    for name in ("a", "b"):
        found = _estimate(tmp_path, name, attacks=ATTACKS[:1])
        assert any("probe failed" in entry for entry in found.not_estimated)
    assert calls == ["ig", "ig"]  # the second dry run tried again


def test_kept_times_are_bounded_those_used_last_first(tmp_path) -> None:
    path = tmp_path / "p.json"
    kept = KeptProbes(path, "cpu")
    for i in range(MOST_KEPT + 10):
        kept.seconds(f"old{i}", lambda: 1.0)
    kept.save()
    again = KeptProbes(path, "cpu")
    assert len(again.times) == MOST_KEPT
    again.seconds("new", lambda: 2.0)
    again.seconds("old5", lambda: pytest.fail("kept: not probed again"))
    again.save()
    final = json.loads(path.read_text())["times"]
    assert len(final) == MOST_KEPT and set(list(final)[:2]) == {"new", "old5"}  # the unused dropped
    assert probe_key("a", {"x": "1"}) != probe_key("a", {"x": "2"})


def test_the_fit_probe_of_a_fitted_defense_is_kept_and_reused(tmp_path, monkeypatch) -> None:
    from leakshield.leaderboard import fit_probe

    calls: list[str] = []

    def fake(config, defense, device, folder):
        calls.append(defense.display)
        return {f"fit · {defense.display}": 60.0}

    monkeypatch.setattr(fit_probe, "_probe_defense", fake)
    config = parse_config(tiny_config(defenses=["none", {"name": "loda", "steps": 50}]))
    path = tmp_path / FIT_PROBES
    for _ in range(2):
        kept = KeptProbes(path, "cpu")
        assert fit_probe.probe_fits(config, "cpu", kept) == {"fit · loda": 60.0}
        kept.save()
    assert calls == ["loda"]
    longer = parse_config(tiny_config(defenses=["none", {"name": "loda", "steps": 500}]))
    kept = KeptProbes(path, "cpu")
    fit_probe.probe_fits(longer, "cpu", kept)
    assert calls == ["loda", "loda"]  # its settings changed: probed again


def test_run_dry_run_says_what_it_reused(tmp_path, capsys) -> None:
    """End to end through the CLI and the real probes: the second dry run probes nothing."""
    from leakshield.cli import main

    config = write_config(tmp_path / "c.yaml", tiny_config(attacks=[{"name": "ig", "iterations": 4}]))
    args = [
        "run",
        str(config),
        "--dry-run",
        "--out",
        str(tmp_path / "run"),
        "--cache-dir",
        str(tmp_path / "k"),
    ]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert main(args) == 0
    second = capsys.readouterr().out
    assert "probes: 0 run," in second and "probes: 0 run," not in first
    total = [line for line in first.splitlines() if line.startswith("estimated total")]
    assert total and total == [line for line in second.splitlines() if line.startswith("estimated total")]


def test_other_execution_settings_or_estimator_code_re_probe(tmp_path, probes, monkeypatch) -> None:
    _estimate(tmp_path, "a")
    probes.clear()
    _estimate(tmp_path, "b", execution={"path": "loop"})  # the attacks run another way: other times
    assert sorted(probes) == [("attack", "dlg"), ("attack", "ig"), ("round", None)]
    probes.clear()
    monkeypatch.setattr(probe_cache, "estimator_code", lambda: "an edited estimator")
    _estimate(tmp_path, "c")
    assert len(probes) == 3


def test_each_thread_count_keeps_its_own_file(tmp_path, probes) -> None:
    import torch

    _estimate(tmp_path, "a")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1 if before > 1 else 2)
        probes.clear()
        _estimate(tmp_path, "b")
        assert len(probes) == 3  # another set-up: its own probes, in its own file
    finally:
        torch.set_num_threads(before)
    probes.clear()
    _estimate(tmp_path, "c")
    assert probes == []  # the first set-up's file was left as it was
    assert len(list((tmp_path / "cache").glob(f"{GRID_PROBES}-*.json"))) == 2


def test_a_detection_cell_is_probed_again_when_the_attacks_it_judges_change(tmp_path, monkeypatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(estimate, "_round_time", lambda context, cell: 0.25)
    monkeypatch.setattr(estimate, "_attack_time", lambda context, cell: 0.0)
    monkeypatch.setattr(estimate, "_detection_time", lambda context, cell: calls.append("judge") or 2.0)
    imprint = {"name": "imprint", "bins": 8}
    for name, attacks in (("a", [imprint]), ("b", [imprint]), ("c", [imprint, {**imprint, "label": "i2"}])):
        _estimate(tmp_path, name, attacks=attacks, defenses=[{"name": "row-guard"}])
    assert calls == ["judge", "judge"]  # kept for b; c judges another model as well


def test_a_cache_that_cannot_be_written_costs_no_estimate(tmp_path, probes, capsys) -> None:
    kept_path(tmp_path / "cache", GRID_PROBES, "cpu").mkdir(parents=True)  # a folder where the file goes
    found = _estimate(tmp_path, "a")
    assert found.kinds and "probe times were not kept" in capsys.readouterr().err


def test_the_leaderboards_dry_run_parts_keep_and_say_what_they_reused(tmp_path, probes, monkeypatch) -> None:
    """Through the leaderboard's two halves (the grid estimator and the fit probe), as its dry run
    calls them in its worker processes: the second call reuses and says so."""
    from leakshield.leaderboard import dry_run, fit_probe

    monkeypatch.setattr(
        fit_probe, "_probe_defense", lambda config, defense, device, folder: {"fit · loda": 9.0}
    )
    config = parse_config(tiny_config(defenses=["none", {"name": "loda", "steps": 50}], attacks=ATTACKS))
    jobs = [("main grid", json.dumps(config.model_dump(mode="json")), str(tmp_path / "run"))]
    cache = str(tmp_path / "cache")
    for reused in (False, True):
        (part,) = dry_run.estimate_grids(jobs, "cpu", cache, 1)
        found, said = dry_run.probe_grids_kept(jobs, "cpu", cache)
        assert found == [{"fit · loda": 9.0}]
        assert ("grid probes: 0 run," in part.text) is reused
        assert said.startswith("fit probes: 0 run, 1 reused" if reused else "fit probes: 1 run, 0 reused")


def test_grids_of_one_dry_run_that_execute_differently_are_probed_apart(tmp_path, probes) -> None:
    memo = estimate.ProbeMemo()  # shared by the grids of one dry run, nothing kept
    for name, execution in (("a", {}), ("b", {"path": "loop"}), ("c", {})):
        config = tiny_config(attacks=ATTACKS[:1], utility={"rounds": 0}, execution=execution)
        runner = ExperimentRunner(parse_config(config), tmp_path / name, device="cpu", progress=False)
        estimate.estimate_grid(runner, memo)
    assert probes == [("attack", "ig"), ("attack", "ig")]  # a, then b's other path; c is a's again
