"""Cells in worker processes and on Ray: identical results to one process, only the driver writes, a
SIGKILL of the driver or of a worker still gives every cell exactly once on rerun; the dry run."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys

import pytest

from leakshield.cli import main
from leakshield.experiment import ResultStore, expand_grid, load_config
from leakshield.experiment.parallel import chains
from leakshield.experiment.store import reproducible

from helpers import tiny_config, write_config

ARGS = ["--quiet", "--device", "cpu", "--threads", "1", "--no-report"]
GRID = {"seeds": [0, 1], "attacks": [{"name": "ig", "iterations": 10}, {"name": "idlg", "iterations": 2}]}


def _records(out):
    return {r.key: r for r in ResultStore(out / "results.sqlite").records()}


def test_chains_keep_the_cells_of_one_model_defense_seed_together(tmp_path):
    config = load_config(write_config(tmp_path / "cfg.yaml", tiny_config(**GRID)))
    groups = chains(expand_grid(config))
    assert groups[0][0].kind == "baseline" and len(groups[0]) == 1
    for group in groups[1:]:
        assert len({(c.coordinates["model"], c.coordinates["defense"], c.seed) for c in group}) == 1
    assert sum(len(g) for g in groups) == len(expand_grid(config))


def test_two_workers_give_the_same_numbers_as_one_process(tmp_path):
    path = write_config(tmp_path / "cfg.yaml", tiny_config(**GRID))
    assert main(["run", str(path), "--out", str(tmp_path / "one"), *ARGS]) == 0
    assert main(["run", str(path), "--out", str(tmp_path / "two"), *ARGS, "--workers", "2"]) == 0
    one, two = _records(tmp_path / "one"), _records(tmp_path / "two")
    assert one.keys() == two.keys()
    for key in one:  # same seeds and one thread each: the same floats
        assert reproducible(one[key].metrics) == reproducible(two[key].metrics), key
        assert one[key].environment["threads"] == two[key].environment["threads"] == 1
        assert (
            one[key].environment["components"] == two[key].environment["components"]
        )  # stamped by the driver
        if one[key].images:
            assert (tmp_path / "two" / two[key].images).read_bytes() == one[key].image_png


KILL_A_WORKER = """
import os, signal, sys
from leakshield.cli import main
from leakshield.experiment import parallel

chain = parallel.run_chain

def run_chain_or_die(*args):
    if os.environ.get("KILL_CHAIN") in "".join(args[2]):  # this worker is killed mid-chain
        os.kill(os.getpid(), signal.SIGKILL)
    return chain(*args)

parallel.run_chain = run_chain_or_die
if __name__ == "__main__":  # spawned workers import this file again (and get the patch)
    sys.exit(main(sys.argv[1:]))
"""


def test_a_killed_worker_loses_only_its_cells_and_the_rerun_computes_them_once(tmp_path):
    path = write_config(tmp_path / "cfg.yaml", tiny_config(**GRID))
    out = tmp_path / "run"
    args = ["run", str(path), "--out", str(out), *ARGS, "--workers", "2"]
    env = {**os.environ, "KILL_CHAIN": '"seed": 1'}
    script = tmp_path / "kill_a_worker.py"
    script.write_text(KILL_A_WORKER)
    killed = subprocess.run(
        [sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=600
    )
    assert killed.returncode == 2, killed.stderr
    assert "leakshield: error: a worker process died" in killed.stderr and "Traceback" not in killed.stderr
    before = {k: r.finished for k, r in _records(out).items()}
    total = len(expand_grid(load_config(path)))
    assert 0 < len(before) < total and all('"seed": 1' not in k for k in before)
    assert main(args) == 0
    with sqlite3.connect(out / "results.sqlite") as conn:
        keys = [row[0] for row in conn.execute("SELECT key FROM cells")]
    assert len(keys) == len(set(keys)) == total
    after = _records(out)
    assert all(after[k].finished == v for k, v in before.items()), "finished cells must not be recomputed"


KILL_THE_DRIVER = """
import os, signal, sys
from leakshield.cli import main
from leakshield.experiment.store import ResultStore

put = ResultStore.put

def put_then_die(self, record):
    put(self, record)
    if record.kind == "attack":
        os.kill(os.getpid(), signal.SIGKILL)

ResultStore.put = put_then_die
if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
"""


def test_a_killed_driver_takes_its_workers_with_it_and_the_rerun_resumes(tmp_path):
    path = write_config(tmp_path / "cfg.yaml", tiny_config(**GRID))
    out = tmp_path / "run"
    args = ["run", str(path), "--out", str(out), *ARGS, "--workers", "2"]
    script = tmp_path / "kill_the_driver.py"
    script.write_text(KILL_THE_DRIVER)
    killed = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    before = {k: r.finished for k, r in _records(out).items()}
    total = len(expand_grid(load_config(path)))
    assert 0 < len(before) < total
    assert main(args) == 0  # the lock of the killed driver is taken over; its workers are gone
    after = _records(out)
    assert len(after) == total and all(after[k].finished == v for k, v in before.items())


def test_dry_run_prints_every_kind_of_cell_and_an_estimate_without_writing(tmp_path, capsys):
    path = write_config(tmp_path / "cfg.yaml", tiny_config(**GRID))
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), *ARGS, "--dry-run", "--workers", "2"]) == 0
    text = capsys.readouterr().out
    assert "attack ig" in text and "attack idlg" in text and "utility" in text
    assert "estimated total:" in text and "with 2 workers" in text
    assert not (out / "results.sqlite").exists()


def test_ray_executor_runs_the_same_cells(tmp_path):
    pytest.importorskip("ray", reason="the Ray executor needs the extra: pip install 'leakshield[ray]'")
    path = write_config(
        tmp_path / "cfg.yaml", tiny_config(seeds=[0], attacks=[{"name": "ig", "iterations": 10}])
    )
    assert main(["run", str(path), "--out", str(tmp_path / "one"), *ARGS]) == 0
    assert main(["run", str(path), "--out", str(tmp_path / "ray"), *ARGS, "--executor", "ray"]) == 0
    one, ray = _records(tmp_path / "one"), _records(tmp_path / "ray")
    assert one.keys() == ray.keys()
    assert all(reproducible(one[k].metrics) == reproducible(ray[k].metrics) for k in one)


def test_dry_run_probes_multi_round_attacks_at_short_round_budgets(tmp_path, monkeypatch):
    """Carlini et al.'s attack has no ``iterations``: its cost grows with the rounds it observes, and
    the probe runs it at 2 and 4 rounds, never at its full 50 (a probe of the whole attack took longer
    than the run it estimates)."""
    from leakshield.experiment import ExperimentRunner, attack_probe, estimate, parse_config

    probed: list[dict] = []

    def fake_run_cell(context, cell):
        probed.append(dict(cell.attack.params) if cell.attack else {})

    monkeypatch.setattr(attack_probe, "run_cell", fake_run_cell)
    carlini = {"name": "carlini", "rounds": 50, "inner_params": {"iterations": 2}}
    config = tiny_config(defenses=[{"name": "mixup", "k": 2}], attacks=[carlini], utility={"rounds": 0})
    runner = ExperimentRunner(parse_config(config), tmp_path / "run", device="cpu", progress=False)
    found = estimate.estimate_grid(runner)
    rounds = sorted({p.get("rounds") for p in probed if "rounds" in p})
    assert rounds[:2] == [2, 4] and max(rounds) <= 50 / 4, probed  # doubled until resolved
    assert any(label.startswith("attack carlini") for label in found.kinds)


def test_dry_run_shortens_the_inversion_each_observed_round_runs(tmp_path, monkeypatch):
    """Carlini et al.'s attack inverts every observed round with an inner attack (1,000 IG steps by
    default): the probe shortens those steps too (from 5 of 1,000, doubled until resolved), and
    extrapolates in both."""
    from leakshield.experiment import ExperimentRunner, attack_probe, estimate, parse_config

    probed: list[dict] = []

    def fake_run_cell(context, cell):
        probed.append(dict(cell.attack.params) if cell.attack else {})

    def fake_timed(run):  # a deterministic clock: each probe "takes" the work its budgets ask
        run()
        p = probed[-1]
        rounds, inner = p.get("rounds", 0), p.get("inner_params", {}).get("iterations", 0)
        return 1.0 + rounds * (0.5 + 0.01 * inner)  # set-up 1 s, 0.5 s a round, 10 ms an inner step

    monkeypatch.setattr(attack_probe, "run_cell", fake_run_cell)
    monkeypatch.setattr(attack_probe, "timed", fake_timed)
    config = tiny_config(defenses=[{"name": "mixup", "k": 2}], attacks=[{"name": "carlini", "rounds": 50}],
                         utility={"rounds": 0})  # fmt: skip
    runner = ExperimentRunner(parse_config(config), tmp_path / "run", device="cpu", progress=False)
    found = estimate.estimate_grid(runner)
    inner = sorted({p["inner_params"]["iterations"] for p in probed if "inner_params" in p})
    assert inner[:2] == [5, 10] and max(inner) <= 250, probed  # doubled until resolved, ≤ a quarter
    (seconds,) = [s for label, (_, s) in found.kinds.items() if label.startswith("attack carlini")]
    assert seconds == pytest.approx(1.0 + 50 * (0.5 + 0.01 * 1000))  # set-up and both budgets recovered


def test_dry_run_counts_the_rounds_a_detection_cell_replays(tmp_path, monkeypatch):
    """A detection cell judges the honest model of every round, which it replays: its estimate is its
    judgements plus one FL round per round of the federation (the run measured 7.0 s for a cell the
    estimate without the replay put at 2.4 s)."""
    from leakshield.experiment import ExperimentRunner, estimate, parse_config

    monkeypatch.setattr(estimate, "_round_time", lambda context, cell: 0.25)
    monkeypatch.setattr(estimate, "_detection_time", lambda context, cell: 2.0)
    monkeypatch.setattr(estimate, "_attack_time", lambda context, cell: 0.0)
    config = tiny_config(defenses=[{"name": "row-guard"}], attacks=[{"name": "imprint", "bins": 8}],
                         utility={"rounds": 12})  # fmt: skip
    runner = ExperimentRunner(parse_config(config), tmp_path / "run", device="cpu", progress=False)
    found = estimate.estimate_grid(runner)
    (seconds,) = [s for label, (_, s) in found.kinds.items() if label.startswith("detection")]
    assert seconds == pytest.approx(2.0 + 12 * 0.25)


def test_dry_run_probes_rounds_only_where_chains_train_and_shares_probes_between_grids(tmp_path, monkeypatch):
    """A chain at round 0 without utility trains nothing: no FL round is probed for it. A second grid of
    the same dry run (a leaderboard scenario) with the same set-up reuses the first grid's probes; one
    whose set-up differs (another batch size of victims) is probed anew."""
    from leakshield.experiment import ExperimentRunner, estimate, parse_config

    calls: list[str] = []
    monkeypatch.setattr(estimate, "_round_time", lambda context, cell: calls.append("round") or 0.5)
    monkeypatch.setattr(estimate, "_attack_time", lambda context, cell: calls.append("attack") or 2.0)
    untrained = tiny_config(attacks=[{"name": "ig", "iterations": 10}], utility={"rounds": 0})
    found = estimate.estimate_grid(ExperimentRunner(parse_config(untrained), tmp_path / "a", progress=False))
    assert calls == ["attack"] and found.training == 0.0

    calls.clear()
    memo = estimate.ProbeMemo()
    trained = {**untrained, "attack": {**untrained.get("attack", {}), "rounds": [0, 2]}}
    first = estimate.estimate_grid(ExperimentRunner(parse_config(trained), tmp_path / "b", progress=False),
                                   memo)  # fmt: skip
    assert calls == ["round", "attack"] and first.training == pytest.approx(0.5 * 2 * len(trained["seeds"]))
    again = {**trained, "name": "scenario", "seeds": [0], "attack": {**trained["attack"], "rounds": [0, 5]}}
    second = estimate.estimate_grid(ExperimentRunner(parse_config(again), tmp_path / "c", progress=False),
                                    memo)  # fmt: skip
    assert calls == ["round", "attack"] and second.training == pytest.approx(0.5 * 5)  # nothing re-probed
    batch = {**again, "victims": {**untrained.get("victims", {}), "count": 1, "batch_size": 2}}
    estimate.estimate_grid(ExperimentRunner(parse_config(batch), tmp_path / "d", progress=False), memo)
    assert calls == ["round", "attack", "attack"]  # the attack's set-up changed; the round's did not
    larger = {**again, "dataset": {**again["dataset"], "size": 12}}
    estimate.estimate_grid(ExperimentRunner(parse_config(larger), tmp_path / "e", progress=False), memo)
    assert calls == ["round", "attack", "attack", "round", "attack"]  # other images: both anew
