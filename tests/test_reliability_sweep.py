"""Regression tests from the reliability probe (one line and exit 2 at load, never a hang, never a late
failure, never a write outside the run folder, never another config's numbers under this one's title)."""

from __future__ import annotations

import math
import re
import shutil
from unittest import mock

import pytest
import yaml

from leakshield.cli import main
from leakshield.defenses.dpsgd import dp_epsilon
from leakshield.experiment.training import TrainedModels

from helpers import idx_bytes, tiny_config, write_config

yaml_dump = yaml.safe_dump

ARGS = ["--quiet", "--device", "cpu", "--threads", "1", "--no-report"]


def _no_training(*args, **kwargs):
    raise AssertionError("a model was trained before the input was refused")


def one_line_exit_2(capsys, argv, *, at_load: bool = True) -> str:
    """``main(argv)`` exits 2 with one line on stderr; ``at_load``: before any model is built or trained
    (a file the fit stage reads, such as a weights file, is refused there instead)."""
    if not at_load:
        assert main(argv) == 2
    else:
        with (
            mock.patch.object(TrainedModels, "fresh", _no_training),
            mock.patch.object(TrainedModels, "at_round", _no_training),
        ):
            assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize(
    ("defense", "field"),
    [
        ({"name": "dp-sgd", "noise_multiplier": math.inf}, "noise_multiplier"),  # hung Opacus's accountant
        ({"name": "gs-wgan", "sigma": math.inf}, "sigma"),  # the same accountant
        ({"name": "loda", "c": math.inf}, "c"),
        ({"name": "gaussian-noise", "sigma": math.nan}, "sigma"),
    ],
)
def test_infinite_or_nan_values_are_refused_at_load(tmp_path, capsys, defense, field):
    path = write_config(tmp_path / "cfg.yaml", tiny_config(defenses=[defense]))
    line = one_line_exit_2(capsys, ["run", str(path), "--out", str(tmp_path / "run"), *ARGS])
    assert f"{field}: Input should be a finite number" in line
    assert not (tmp_path / "run").exists()


def test_the_accountant_refuses_an_infinite_noise_multiplier_at_once():
    with pytest.raises(ValueError, match="finite"):  # before Opacus's accountant, which loops on it
        dp_epsilon(math.inf, 0.5, 2, 1e-5)


@pytest.mark.parametrize("name", ["../../escaped", "/absolute/dir", "", "..", "nul\x00byte", "a/b"])
def test_a_run_name_is_a_file_name(tmp_path, capsys, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    path = write_config(tmp_path / "cfg.yaml", tiny_config(name=name))
    line = one_line_exit_2(capsys, ["run", str(path), *ARGS])
    assert "name:" in line and "not a file name" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cfg.yaml", "work"]
    assert not any((tmp_path / "work").iterdir())


def test_report_refuses_a_store_of_another_config(tmp_path, capsys):
    """A run directory whose results.sqlite came from another config (copied over it) is refused in one
    line; it once printed this config's title over the other run's numbers."""
    first, second = tmp_path / "a", tmp_path / "b"
    assert (
        main(
            ["run", str(write_config(tmp_path / "a.yaml", tiny_config(name="a"))), "--out", str(first), *ARGS]
        )
        == 0
    )
    other = tiny_config(name="b", seeds=[1])
    assert main(["run", str(write_config(tmp_path / "b.yaml", other)), "--out", str(second), *ARGS]) == 0
    shutil.copy(first / "results.sqlite", second / "results.sqlite")
    line = one_line_exit_2(capsys, ["report", str(second)])
    assert "holds cells of another config" in line
    line = one_line_exit_2(capsys, ["run", str(tmp_path / "b.yaml"), "--out", str(second), *ARGS])
    assert "holds cells of another config" in line


def test_a_weights_file_enters_the_artifact_key_by_content(tmp_path, capsys):
    """LODA's ``weights`` once entered the key by path: overwriting the file with other tensors gave "0
    fitted, 2 reused" and the old numbers. Now the content hash is in the key: a changed file refits."""
    from safetensors.torch import save_file

    from leakshield.data import load_dataset
    from leakshield.defenses.loda.extractor import ExtractorParams, build_extractor

    info = load_dataset("digits", {"channels": 1, "size": 16}).info
    weights = tmp_path / "extractor.safetensors"

    def write(seed: int) -> None:
        net = build_extractor(ExtractorParams(), info, seed)
        save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(weights))

    write(0)
    loda = {"name": "loda", "weights": str(weights), "steps": 2, "chunk": 8}
    config = tiny_config(defenses=[loda], dataset={"name": "digits", "channels": 1, "size": 16})
    path = write_config(tmp_path / "cfg.yaml", config)
    fit = ["fit", str(path), "--quiet", "--device", "cpu", "--cache-dir", str(tmp_path / "cache")]

    def fitted() -> int:
        assert main(fit) == 0
        return int(re.search(r": (\d+) fitted", capsys.readouterr().out).group(1))

    assert fitted() > 0
    assert fitted() == 0  # the same file: every artifact reused
    write(1)  # the same path, other tensors
    assert fitted() > 0


def _save_many(root: str, rounds: int) -> int:
    import torch

    from leakshield.artifacts import Artifact, ArtifactCache, FitKey

    cache = ArtifactCache(root)
    key = FitKey("test:race", {"n": 1}, "public", "data", 0)
    for _ in range(rounds):
        cache.save(key, Artifact({"x": torch.arange(1000.0)}))
    return rounds


@pytest.mark.parametrize("rounds", [150, pytest.param(2_500, marks=pytest.mark.slow, id="10k")])
def test_concurrent_saves_of_one_artifact_never_fail(tmp_path, rounds):
    """Four processes storing the same artifact ``rounds`` times each, all at once (600 saves; 10,000 in
    the long mode): every save succeeds (it once failed with "Directory not empty" about once in 170)
    and the stored artifact is whole."""
    import multiprocessing

    import torch

    from leakshield.artifacts import ArtifactCache, FitKey

    with multiprocessing.get_context("fork").Pool(4) as pool:
        done = pool.starmap(_save_many, [(str(tmp_path), rounds)] * 4)
    assert done == [rounds] * 4
    stored = ArtifactCache(tmp_path).load(FitKey("test:race", {"n": 1}, "public", "data", 0))
    assert stored is not None and torch.equal(stored.tensors["x"], torch.arange(1000.0))
    assert not [p for p in tmp_path.rglob(".*") if p.is_dir()]  # no temporary folder left behind


@pytest.mark.parametrize("kind", ["file", "dev-null"])
def test_an_unusable_cache_folder_is_refused_before_any_work(tmp_path, capsys, kind):
    target = tmp_path / "a-file" if kind == "file" else "/dev/null"
    if kind == "file":
        target.write_text("not a folder")
    path = write_config(tmp_path / "cfg.yaml", tiny_config())
    line = one_line_exit_2(capsys, ["run", str(path), "--out", str(tmp_path / "run"), *ARGS,
                                    "--cache-dir", str(target)])  # fmt: skip
    assert "--cache-dir" in line and "not a writable folder" in line
    assert not (tmp_path / "run").exists()
    fitting = write_config(tmp_path / "fits.yaml", tiny_config(defenses=[{"name": "loda", "steps": 2}]))
    line = one_line_exit_2(capsys, ["fit", str(fitting), "--quiet", "--cache-dir", str(target)])
    assert "not a writable folder" in line


def bad_files(tmp_path):
    """The damaged files every command must refuse in one line (a name → its path)."""
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\x00\x01\x02 not yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    return {
        "binary": binary,
        "broken": broken,
        "list": listed,
        "folder": folder,
        "missing": tmp_path / "no.yaml",
    }


def test_every_command_reads_its_file_through_one_reader(tmp_path, capsys):
    for name, path in bad_files(tmp_path).items():
        for argv in (["run", str(path)], ["fit", str(path)], ["ats", "search", str(path)],
                     ["leaderboard", "--config", str(path), "--out", str(tmp_path / "lb")]):  # fmt: skip
            line = one_line_exit_2(capsys, [*argv, "--quiet"])
            assert str(path) in line or path.name in line, (name, argv, line)


def test_leaderboard_params_must_be_mappings(tmp_path, capsys):
    board = tmp_path / "board.yaml"
    board.write_text("base: {name: b, models: [lenet], attacks: [ig]}\npresets: {quick: {params: {ig: 5}}}\n")
    line = one_line_exit_2(capsys, ["leaderboard", "--config", str(board), "--quiet"])
    assert "params" in line and "ig" in line


def test_a_data_root_that_would_be_ignored_is_refused(tmp_path, capsys):
    path = write_config(tmp_path / "cfg.yaml", tiny_config())  # digits: embedded, reads no files
    line = one_line_exit_2(capsys, ["run", str(path), "--data-root", str(tmp_path), "--out",
                                    str(tmp_path / "run"), *ARGS])  # fmt: skip
    assert "digits is embedded" in line and "reads no files" in line and not (tmp_path / "run").exists()
    board = tmp_path / "board.yaml"
    board.write_text("base: {name: b, models: [lenet], attacks: [ig]}\npresets: {quick: {}}\n")
    line = one_line_exit_2(capsys, ["leaderboard", "--config", str(board), "--data-root", str(tmp_path),
                                    "--out", str(tmp_path / "lb"), "--quiet"])  # fmt: skip
    assert "--data-root" in line and "no 'cifar10' section" in line


@pytest.mark.parametrize(
    ("seeds", "expected"),
    [
        ([3, 1, 3], "seeds: repeated [3]; each seed is one repetition"),
        (list(range(200_000)), "the grid has up to 600,001 cells (seeds 200000 × models 1"),
    ],
)
def test_a_grid_too_large_or_with_repeated_seeds_is_one_line_at_once(tmp_path, capsys, seeds, expected):
    path = write_config(tmp_path / "cfg.yaml", "seeds: [" + ", ".join(map(str, seeds)) + "]\n" + yaml_dump(
        {k: v for k, v in tiny_config().items() if k != "seeds"}))  # fmt: skip
    line = one_line_exit_2(capsys, ["run", str(path), "--dry-run", "--out", str(tmp_path / "run"), *ARGS])
    assert expected in line, line


def test_leaderboard_readme_and_workers_are_checked_before_any_work(tmp_path, capsys):
    out = tmp_path / "lb"
    line = one_line_exit_2(capsys, ["leaderboard", "--readme", str(tmp_path / "NO-README.md"), "--out",
                                    str(out), "--quiet"])  # fmt: skip
    assert "--readme" in line and not out.exists()
    for workers in ("0", "-3", "999"):
        line = one_line_exit_2(capsys, ["leaderboard", "--workers", workers, "--out", str(out), "--quiet"])
        assert "--workers" in line and not out.exists()


def write_idx(folder, *, labels_train=None, gz_plain=False, truncate_gz=False):
    """MNIST's four IDX files (60 train, 20 test images), optionally damaged."""
    import gzip

    import numpy as np

    rng = np.random.default_rng(0)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (60, 28, 28)),
        "train-labels-idx1-ubyte": rng.integers(0, 10, 60) if labels_train is None else labels_train,
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (20, 28, 28)),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, 20),
    }
    for name, array in arrays.items():
        data = gzip.compress(idx_bytes(array))
        if gz_plain:
            data = idx_bytes(array)  # a plain file named .gz
        if truncate_gz:
            data = data[: len(data) // 2]
        (folder / f"{name}.gz").write_bytes(data)


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ({"gz_plain": True}, "damaged or not in mnist's format"),
        ({"truncate_gz": True}, "damaged or not in mnist's format"),
        ({"labels_train": list(range(10)) * 5 + [1] * 9}, r"x \(60, 1, 28, 28\), y \(59,\)"),
        ({"labels_train": [200] + [1] * 59}, "label 200; classes are 0..9"),
    ],
)
def test_a_damaged_data_file_is_one_line(tmp_path, capsys, damage, expected):
    import numpy as np

    from leakshield.data import load_dataset
    from leakshield.errors import DataFileMissingError

    if "labels_train" in damage:
        damage = {**damage, "labels_train": np.array(damage["labels_train"])}
    write_idx(tmp_path, **damage)
    with pytest.raises(DataFileMissingError, match=expected):
        load_dataset("mnist", root=tmp_path)
    config = tiny_config(dataset={"name": "mnist", "root": str(tmp_path)})
    line = one_line_exit_2(capsys, ["run", str(write_config(tmp_path / "cfg.yaml", config)), "--out",
                                    str(tmp_path / "run"), *ARGS])  # fmt: skip
    assert re.search(expected.split(";")[0], line), line


def test_a_decompression_bomb_is_refused_with_the_limit_stated(tmp_path, monkeypatch):
    """Pillow's pixel limit (89,478,485 by default) guards every picture loader; a picture above it is one
    line (a 20000² PNG once raised DecompressionBombError). Shown with the limit lowered to 100 pixels."""
    from PIL import Image

    from leakshield.data import load_dataset
    from leakshield.errors import DataFileMissingError

    for k in range(2):
        (tmp_path / f"c{k}").mkdir()
        for i in range(3):
            Image.new("RGB", (8, 8), (k * 100, i * 50, 0)).save(tmp_path / f"c{k}" / f"{i}.png")
    Image.new("RGB", (300, 300)).save(tmp_path / "c1" / "bomb.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    with pytest.raises(
        DataFileMissingError, match=r"bomb\.png: over 100 pixels, refused as a possible decompression"
    ):
        load_dataset("imagefolder", {"size": 8}, root=tmp_path)


@pytest.mark.parametrize("damage", ["empty", "truncated", "pickle", "shape"])
def test_a_damaged_weights_file_is_one_line_and_never_unpickled(tmp_path, capsys, damage):
    import pickle

    import torch
    from safetensors.torch import save_file

    from leakshield.data import load_dataset
    from leakshield.defenses.loda.extractor import ExtractorParams, build_extractor

    info = load_dataset("digits", {"channels": 1, "size": 16}).info
    weights = tmp_path / "w.safetensors"
    state = {k: v.contiguous() for k, v in build_extractor(ExtractorParams(), info, 0).state_dict().items()}
    if damage == "empty":
        weights.write_bytes(b"")
    elif damage == "truncated":
        save_file(state, str(weights))
        weights.write_bytes(weights.read_bytes()[:200])
    elif damage == "pickle":
        marker = tmp_path / "unpickled"
        weights.write_bytes(pickle.dumps(_Boom(str(marker))))
    else:
        save_file({**state, "features.0.weight": torch.zeros(3, 3)}, str(weights))
    config = tiny_config(defenses=[{"name": "loda", "weights": str(weights), "steps": 2}],
                         dataset={"name": "digits", "channels": 1, "size": 16})  # fmt: skip
    path = write_config(tmp_path / "cfg.yaml", config)
    line = one_line_exit_2(
        capsys, ["fit", str(path), "--quiet", "--cache-dir", str(tmp_path / "cache")], at_load=False
    )
    assert line.startswith("leakshield: error: weights:") and str(weights) in line
    if damage == "pickle":
        assert not (tmp_path / "unpickled").exists()
    if damage == "shape":
        assert "of another shape" in line


class _Boom:
    """A pickle that would leave a file behind if anything unpickled it."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_participant_attacker_outside_the_federation_is_refused_at_load(tmp_path, capsys):
    config = tiny_config(attacks=[{"name": "hitaj", "attacker": 99}])
    path = write_config(tmp_path / "cfg.yaml", config)
    line = one_line_exit_2(capsys, ["run", str(path), "--out", str(tmp_path / "run"), *ARGS])
    assert "attacks[0].attacker: client 99" in line and not (tmp_path / "run").exists()


@pytest.mark.parametrize("damage", ["garbage", "list", "images-file"])
def test_a_damaged_run_directory_is_one_line(tmp_path, capsys, damage):
    out = tmp_path / "run"
    path = write_config(tmp_path / "cfg.yaml", tiny_config())
    assert main(["run", str(path), "--out", str(out), *ARGS]) == 0
    if damage == "garbage":
        (out / "config.json").write_bytes(b"\x00garbage{")
    elif damage == "list":
        (out / "config.json").write_text("[1, 2, 3]")
    else:
        import shutil as sh

        sh.rmtree(out / "images")
        (out / "images").write_text("a file where the images were")
    line = one_line_exit_2(capsys, ["report", str(out)])
    assert str(out) in line
    if damage != "images-file":
        line = one_line_exit_2(capsys, ["run", str(path), "--out", str(out), *ARGS])
        assert "config.json" in line


def test_a_stored_row_damaged_past_the_integrity_check_is_one_line_and_repaired(tmp_path, capsys):
    """Found by the long fuzz: a page whose bytes still pass SQLite's quick_check but hold a cell's JSON
    cut short made `report` raise JSONDecodeError."""
    import sqlite3

    out = tmp_path / "run"
    path = write_config(tmp_path / "cfg.yaml", tiny_config())
    assert main(["run", str(path), "--out", str(out), *ARGS]) == 0
    with sqlite3.connect(out / "results.sqlite") as db:
        total = db.execute("SELECT count(*) FROM cells").fetchone()[0]
        db.execute("UPDATE cells SET metrics = '{\"ssim\": 0.' WHERE rowid = 2")
    line = one_line_exit_2(capsys, ["report", str(out)])
    assert (
        "results.sqlite is damaged (a cell row is unreadable: JSONDecodeError" in line and "--repair" in line
    )
    assert main(["run", str(path), "--out", str(out), "--repair", *ARGS]) == 0
    assert f"repaired: kept {total - 1} readable cells" in capsys.readouterr().out
    assert main(["report", str(out)]) == 0


def test_a_png_with_a_broken_chunk_is_one_line(tmp_path):
    """Found by the long fuzz: Pillow raises SyntaxError (not OSError) for a broken PNG chunk."""
    import numpy as np
    from PIL import Image

    from leakshield.data import load_dataset
    from leakshield.errors import DataFileMissingError

    for c in ("a", "b"):
        (tmp_path / c).mkdir()
        for i in range(2):
            Image.fromarray(np.full((12, 12, 3), 40 * i, dtype=np.uint8)).save(tmp_path / c / f"{i}.png")
    picture = tmp_path / "a" / "0.png"
    data = bytearray(picture.read_bytes())
    data[33:37] = (2).to_bytes(4, "big")  # IDAT shortened to 2 bytes: the next chunk header is garbage
    picture.write_bytes(bytes(data))
    with pytest.raises(DataFileMissingError, match=r"0\.png: not a readable image \(SyntaxError\)"):
        load_dataset("imagefolder", {"size": 16}, root=tmp_path)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ("seed: 12345678901234567890123\n", "seed"),
        ("model: {}\n", "model"),
        ("search: {accuracy_threshold: .nan}\n", "accuracy_threshold"),
        ("name: ../out\n", "name"),
        ("", "the search config is empty; write at least 'search: {}'"),
        ("# only a comment\n", "the search config is empty"),
    ],
)
def test_ats_search_refuses_at_load(tmp_path, capsys, config, expected):
    path = tmp_path / "search.yaml"
    path.write_text(config)
    line = one_line_exit_2(capsys, ["ats", "search", str(path), "--out", str(tmp_path / "out"), "--quiet"])
    assert expected in line and not (tmp_path / "out").exists()


def test_ats_search_refuses_an_out_that_is_a_file_before_searching(tmp_path, capsys):
    path = tmp_path / "search.yaml"
    path.write_text("model: {name: lenet}\ndataset: {name: digits, size: 16, channels: 1}\n")
    target = tmp_path / "out"
    target.write_text("a file")
    line = one_line_exit_2(capsys, ["ats", "search", str(path), "--out", str(target), "--quiet"])
    assert "--out" in line and "is a file" in line


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (
            {"attacks": [{"name": "hitaj", "targets": [99]}]},
            "attacks[0].targets: [99] outside the classes 0..9",
        ),
        (
            {"attacks": [{"name": "hitaj", "inject_label": 99}]},
            "attacks[0].inject_label: 99 outside the classes",
        ),
        ({"attacks": [{"name": "hitaj", "window": 17}]}, "attacks[0].window: 17 is larger than the 16×16"),
        (
            {"defenses": [{"name": "antigan", "window": 32}]},
            "defenses[0].window: 32 is larger than the 16×16",
        ),
        (
            {"defenses": [{"name": "dc", "depth": 99}]},
            "defenses[0].depth: 99 halves 16-pixel images below one pixel; allowed: 1..4",
        ),
        ({"defenses": [{"stack": ["none", {"name": "dm", "depth": 5}]}]}, "defenses[0].stack[1].depth: 5"),
    ],
)
def test_values_that_cannot_fit_the_data_are_refused_before_training(tmp_path, capsys, entry, expected):
    path = write_config(tmp_path / "cfg.yaml", tiny_config(**entry))
    line = one_line_exit_2(capsys, ["run", str(path), "--out", str(tmp_path / "run"), *ARGS])
    assert expected in line, line
    if "defenses" in entry:  # these need fitting: `fit` refuses them alike
        line = one_line_exit_2(capsys, ["fit", str(path), "--cache-dir", str(tmp_path / "cache"), "--quiet"])
        assert expected in line, line
