"""Reliability as a user meets it: one run per directory (a second process is refused in one line, a lock
left by a killed run is taken over), a damaged result store is reported and repaired, and every bad input
is one line on stderr, exit status 2, nothing written."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys

import pytest

from leakshield.cli import main
from leakshield.experiment import ResultStore
from leakshield.experiment.lock import RunLock

from helpers import tiny_config, write_config

ARGS = ["--quiet", "--device", "cpu", "--threads", "1", "--no-report"]


def _run(path, out, *extra):
    return main(["run", str(path), "--out", str(out), *ARGS, *extra])


def test_a_second_process_on_the_same_run_directory_is_refused(tmp_path):
    path = write_config(tmp_path / "cfg.yaml", tiny_config())
    out = tmp_path / "run"
    with RunLock(out):  # this test process holds the run directory
        other = subprocess.run(
            [sys.executable, "-m", "leakshield", "run", str(path), "--out", str(out), *ARGS],
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert other.returncode == 2
    lines = other.stderr.strip().splitlines()
    assert len(lines) == 1 and f"is in use by process {os.getpid()}" in lines[0], other.stderr
    assert not (out / "results.sqlite").exists()


def test_a_lock_left_by_a_killed_run_is_taken_over(tmp_path):
    path = write_config(tmp_path / "cfg.yaml", tiny_config())
    out = tmp_path / "run"
    holder = "import os, signal, sys; from leakshield.experiment.lock import RunLock\n"
    holder += "with RunLock(sys.argv[1]): os.kill(os.getpid(), signal.SIGKILL)"
    killed = subprocess.run([sys.executable, "-c", holder, str(out)], timeout=120)
    assert killed.returncode == -signal.SIGKILL and (out / ".lock").read_text()
    assert _run(path, out) == 0
    assert len(ResultStore(out / "results.sqlite").records()) == 3


def test_a_damaged_store_is_one_line_and_repair_keeps_the_readable_cells(tmp_path, capsys):
    path = write_config(tmp_path / "cfg.yaml", tiny_config(seeds=[0, 1, 2, 3]))
    out = tmp_path / "run"
    assert _run(path, out) == 0
    db = out / "results.sqlite"
    with sqlite3.connect(db) as conn:
        total = conn.execute("SELECT COUNT(*) FROM cells").fetchone()[0]
    capsys.readouterr()
    db.write_bytes(db.read_bytes()[:5000])  # truncated, as a full disk or a crash can leave it
    assert _run(path, out) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is damaged" in err[0] and "--repair" in err[0], err
    assert _run(path, out, "--repair") == 0
    said = capsys.readouterr().out
    assert "repaired: kept" in said and "computed" in said
    assert len(ResultStore(db).records()) == total
    assert list(out.glob("results.sqlite.corrupt-*")), "the damaged file is kept aside"


def _bad_inputs(tmp_path):
    good = write_config(tmp_path / "good.yaml", tiny_config())
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("name: caf\xe9\n".encode("latin-1"))
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    listing = write_config(tmp_path / "list.yaml", "- just\n- a list\n")
    return [
        (["run", str(binary)], "is a binary file, not a YAML config"),
        (["run", str(latin)], "not UTF-8 text"),
        (["run", str(tmp_path)], "is a folder, not a YAML config file"),
        (["run", str(tmp_path / "missing.yaml")], "cannot read config"),
        (["run", str(listing)], "expected a mapping"),
        (["run", str(good), "--out", str(a_file)], "is a file, not a run directory"),
        (["run", str(good), "--out", str(a_file / "run")], "is a file, so the run directory cannot be"),
        (["run", str(good), "--data-root", str(a_file)], "is a file, not a folder"),
        (["run", str(good), "--out", "/proc/leakshield-run"], "cannot create it in /proc"),
        (["run", str(good), "--threads", "0"], "must be at least 1"),
        (["fit", str(binary)], "is a binary file"),
    ]


def test_every_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path, capsys):
    cases = _bad_inputs(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    for argv, message in cases:
        out = [] if "--out" in argv or argv[0] != "run" else ["--out", str(tmp_path / "never")]
        try:
            code = main([*argv, *out, "--quiet"])
        except SystemExit as exc:  # argparse's own errors
            code = exc.code
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2, (argv, err)
        assert len(err) == 1 and message in err[0], (argv, err)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("threads", [1, 2])
def test_threads_option_is_applied(threads, tmp_path):
    import torch

    path = write_config(tmp_path / "cfg.yaml", tiny_config(utility={"rounds": 0}))
    assert main(["run", str(path), "--out", str(tmp_path / "r"), "--quiet", "--threads", str(threads)]) == 0
    assert torch.get_num_threads() == threads


def test_report_regenerates_missing_image_files(tmp_path):
    path = write_config(tmp_path / "cfg.yaml", tiny_config())
    out = tmp_path / "run"
    assert _run(path, out) == 0
    images = sorted((out / "images").glob("*.png"))
    originals = {p.name: p.read_bytes() for p in images}
    for p in images:
        p.unlink()
    assert main(["report", str(out)]) == 0
    assert {p.name: p.read_bytes() for p in (out / "images").glob("*.png")} == originals


def test_cells_record_the_environment_their_floats_depend_on(tmp_path):
    path = write_config(tmp_path / "cfg.yaml", tiny_config())
    out = tmp_path / "run"
    assert _run(path, out) == 0
    environment = ResultStore(out / "results.sqlite").records()[0].environment
    assert environment["threads"] == 1 and environment["device"] == "cpu" and environment["torch"]


def test_a_store_of_the_first_release_is_upgraded_in_place(tmp_path):
    db = tmp_path / "results.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE cells (key TEXT PRIMARY KEY, kind TEXT NOT NULL, model TEXT, defense TEXT, "
            "attack TEXT, round INTEGER, seed INTEGER, status TEXT NOT NULL, metrics TEXT NOT NULL, "
            "victims TEXT NOT NULL, error TEXT, images TEXT, seconds REAL, finished REAL NOT NULL)"
        )
        conn.execute(
            "INSERT INTO cells VALUES ('k','baseline',NULL,NULL,NULL,NULL,NULL,'ok','{}','[]',NULL,NULL,1,2)"
        )
    (record,) = ResultStore(db).records()
    assert record.key == "k" and record.environment == {} and record.image_png is None
