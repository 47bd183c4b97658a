"""The dry run keeps its probe times (``dry-run-probes.json`` in the artifact cache) and a second dry run
reuses every probe whose code and settings are unchanged: an edit to one attack re-probes that attack
and nothing else; a file measured on another machine, damaged, or of a failed probe is not trusted."""

from __future__ import annotations

import json

import pytest

from leakshield.experiment import ExperimentRunner, estimate, parse_config
from leakshield.experiment import stamps as stamps_module
from leakshield.experiment.probe_cache import FIT_PROBES, GRID_PROBES, MOST_KEPT, KeptProbes, probe_key

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


def _estimate(tmp_path, name: str, attacks=ATTACKS, cache: str = "cache"):
    config = tiny_config(attacks=attacks, utility={"rounds": 2})
    runner = ExperimentRunner(parse_config(config), tmp_path / name, device="cpu", progress=False,
                              cache_dir=str(tmp_path / cache))  # fmt: skip
    return estimate.estimate_grid(runner)


def test_a_second_dry_run_reuses_every_probe_with_the_same_estimate(tmp_path, probes) -> None:
    first = _estimate(tmp_path, "a")
    assert sorted(probes) == [("attack", "dlg"), ("attack", "ig"), ("round", None)]
    assert (tmp_path / "cache" / GRID_PROBES).is_file()
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
    path = tmp_path / "cache" / GRID_PROBES
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
