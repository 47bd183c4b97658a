"""``--stop-after MINUTES``: a run stops starting cells at its deadline (exit status 3), keeps what it
computed, and a rerun completes it with the numbers of an uninterrupted run, in one process and with
worker processes. A deadline of 0 minutes makes the stop point exact without a clock: the first cell
(one process) or the first chain per worker runs, nothing after it."""

from __future__ import annotations

import pytest

from leakshield.cli import main
from leakshield.cli_common import STOPPED
from leakshield.experiment import ResultStore, expand_grid, load_config
from leakshield.experiment.parallel import chains
from leakshield.experiment.store import reproducible

from helpers import tiny_config, write_config

ARGS = ["--quiet", "--device", "cpu", "--threads", "1", "--no-report"]
GRID = {"seeds": [0, 1], "attacks": [{"name": "ig", "iterations": 10}, {"name": "idlg", "iterations": 2}]}


def _records(out):
    return {r.key: r for r in ResultStore(out / "results.sqlite").records()}


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    folder = tmp_path_factory.mktemp("stop-after")
    path = write_config(folder / "cfg.yaml", tiny_config(**GRID))
    assert main(["run", str(path), "--out", str(folder / "whole"), *ARGS]) == 0
    return path, _records(folder / "whole")


def _same_as_uninterrupted(records, whole):
    assert records.keys() == whole.keys()
    for key, record in records.items():
        assert reproducible(record.metrics) == reproducible(whole[key].metrics), key


def test_a_run_stopped_at_its_deadline_resumes_to_the_uninterrupted_numbers(grid, tmp_path, capsys):
    path, whole = grid
    out = tmp_path / "stopped"
    assert main(["run", str(path), "--out", str(out), *ARGS, "--stop-after", "0"]) == STOPPED
    assert len(_records(out)) == 1  # the first cell ran, no other started
    assert f"{len(whole) - 1} cells left; rerun the same command" in capsys.readouterr().out
    assert main(["run", str(path), "--out", str(out), *ARGS]) == 0
    _same_as_uninterrupted(_records(out), whole)


def test_workers_start_no_chain_after_the_deadline_and_the_rerun_completes(grid, tmp_path):
    path, whole = grid
    out = tmp_path / "workers"
    first_two = chains(expand_grid(load_config(path)))[:2]
    args = [*ARGS, "--workers", "2"]
    assert main(["run", str(path), "--out", str(out), *args, "--stop-after", "0"]) == STOPPED
    assert set(_records(out)) == {cell.key for chain in first_two for cell in chain}
    assert main(["run", str(path), "--out", str(out), *args]) == 0
    _same_as_uninterrupted(_records(out), whole)


@pytest.mark.parametrize("value", ["-1", "nan"])
def test_a_deadline_that_is_no_duration_is_a_one_line_error(grid, tmp_path, capsys, value):
    path, _ = grid
    with pytest.raises(SystemExit) as stop:
        main(["run", str(path), "--out", str(tmp_path / "x"), *ARGS, "--stop-after", value])
    assert stop.value.code == 2
    expected = f"--stop-after: must be a finite number of minutes, at least 0, got {value}"
    assert expected in capsys.readouterr().err


def test_a_leaderboard_stopped_builds_nothing_and_a_stopped_sweep_selects_nothing(tmp_path, capsys):
    """``leaderboard``: past the deadline no scenario grid starts and no leaderboard is built from part of
    the cells; ``--tune``: no learning rate is selected from part of the sweep."""
    import yaml
    from test_leaderboard import TINY

    config, out = tmp_path / "board.yaml", tmp_path / "run"
    config.write_text(yaml.safe_dump(TINY))
    args = ["leaderboard", "--config", str(config), "--preset", "smoke", "--out", str(out), "--quiet"]
    assert main([*args, "--device", "cpu", "--stop-after", "0"]) == STOPPED
    assert len(_records(out)) == 1 and not (out / "scenarios").exists()
    assert not list(out.glob("leaderboard*.html"))
    assert main([*args, "--device", "cpu", "--tune", "--stop-after", "0"]) == STOPPED
    assert not (tmp_path / "run-tuning" / "tuning.json").exists()
    assert "selected on the public split" not in capsys.readouterr().out
