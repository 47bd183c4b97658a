"""The ``gpu`` leaderboard preset and the device script that runs it on a lend
(benchmarks/gpu_preset.py), checked on the CPU: the preset reads a CIFAR-10 .npz given as
``--data-root`` (the file or its folder), its victims fit the client's images, and the script's tiny
run goes end to end, stops when told, packs its run directory and resumes from the archive on a fresh
folder; its dry mode prints the plan and the preset's estimate."""

from __future__ import annotations

import json
import tarfile

import numpy as np
import pytest

from leakshield.data import load_dataset
from leakshield.errors import LeakshieldError
from leakshield.experiment.cells import expand_grid
from leakshield.leaderboard.presets import load_leaderboard, load_scenarios, load_stage_two_victims

from helpers import benchmark_script

script = benchmark_script("gpu_preset")
projection = benchmark_script("gpu_projection")


@pytest.fixture
def npz(tmp_path):
    return script.synthetic_npz(tmp_path / "cifar10.npz")


def test_the_preset_reads_the_npz_given_as_the_file_or_its_folder(npz, tmp_path) -> None:
    named = script.synthetic_npz(tmp_path / "victims128.npz")
    by_file = load_leaderboard("gpu", data_root=named)
    assert (by_file.dataset.name, by_file.dataset.root) == ("npz", str(tmp_path))
    assert (
        by_file.dataset.params["file"] == "victims128.npz" and by_file.dataset.params["classes"] == "cifar10"
    )
    by_folder = load_leaderboard("gpu", data_root=npz.parent)  # the folder: its cifar10.npz
    assert by_folder.dataset.params["file"] == "cifar10.npz" and by_folder.dataset.root == str(tmp_path)
    assert {m.display for m in by_file.models} == {"resnet18-w64"}
    assert by_file.attack.model_mode == "eval" and by_file.models[0].params["width"] == 64
    batch = dict((n, c) for n, c, _ in load_scenarios("gpu", data_root=named))["gpu-batch"]
    assert batch.attack.model_mode == "train" and batch.victims.batch_size == 64  # BatchNorm's statistics
    # the other presets keep the CIFAR-10 switch (binary batches under the root)
    assert load_leaderboard("quick", data_root=npz.parent).dataset.name == "cifar10"


def test_without_its_file_the_preset_is_one_line_naming_it(tmp_path) -> None:
    from leakshield.experiment.compatibility import check_grids_fit_models

    config = load_leaderboard("gpu", data_root=tmp_path)
    with pytest.raises(LeakshieldError, match=r"cifar10\.npz does not exist"):
        check_grids_fit_models([config])
    missing = load_leaderboard("gpu", data_root=tmp_path / "typo.npz")  # a file that is not there
    with pytest.raises(LeakshieldError, match=r"typo\.npz does not exist"):
        check_grids_fit_models([missing])


def test_the_victims_of_both_stages_and_the_largest_batch_fit_a_128_image_file(npz) -> None:
    config = load_leaderboard("gpu", data_root=npz)
    data = load_dataset("npz", config.dataset.params, root=config.dataset.root)
    assert config.fl.clients == 1  # the one client holds the whole training split
    fresh = load_stage_two_victims("gpu")
    assert (config.victims.count + fresh) * config.victims.batch_size <= len(data.train)
    largest = max(max((s.axes.batch_size or [0]) + [s.victims.count * s.victims.batch_size])
                  for _, s, _ in load_scenarios("gpu", data_root=npz))  # fmt: skip
    assert largest <= len(data.train) and len(set(data.test.y.tolist())) >= 2


def test_the_tiny_run_stops_when_told_packs_its_run_and_resumes_on_a_fresh_folder(tmp_path) -> None:
    """Command one stops after its first cells (exit 3, cells left, archived); command two, on a fresh
    folder as a fresh machine would be, unpacks that archive and finishes from it."""
    first = tmp_path / "first"
    assert script.main(["--tiny", "--only", "preset", "--stop-after", "0.01", "--out", str(first)]) == 0
    summary = json.loads((first / "summary.json").read_text())
    assert summary["preset"]["exit"] == 3 and summary["archive"]["cells left"] is True
    with tarfile.open(first / "run.tar.gz") as tar:
        assert "run/results.sqlite" in tar.getnames()

    second = tmp_path / "second"
    argv = [
        "--tiny",
        "--only",
        "environment,preset",
        "--resume",
        str(first / "run.tar.gz"),
        "--out",
        str(second),
    ]
    assert script.main(argv) == 0
    summary = json.loads((second / "summary.json").read_text())
    assert summary["preset"]["exit"] == 0 and summary["archive"]["cells left"] is False
    log = (second / "leaderboard.log").read_text()
    stored = [int(line.split(" already stored")[0].rsplit(" ", 1)[1]) for line in log.splitlines()
              if " already stored" in line]  # fmt: skip
    assert stored and stored[0] > 0  # the main grid went on from the first command's cells
    board = json.loads((second / "run" / "leaderboard.json").read_text())
    assert board["run"]["preset"] == "gpu" and board["cells"]
    assert {"environment", "preset", "archive"} <= set(summary)
    assert summary["archive"]["mib"] < 64  # small enough to bring home (and to carry back)


def test_the_dry_mode_prints_the_plan_and_the_projection(tmp_path) -> None:
    assert script.main(["--dry", "--tiny", "--only", "environment", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert "--preset gpu" in summary["plan"]["preset"] and "--device cuda" in summary["plan"]["preset"]
    found = summary["H200 projection"]
    assert found["cpu rate (IG image·steps/s)"] > 0 and found["h200 seconds"] > 0
    assert set(found["grids"]) >= {"main grid", "scenario gpu-batch", "stage 2 (bound)"}
    log = (tmp_path / "dry-run.log").read_text()
    assert "— main grid" in log and "projected on an H200" in log
    assert not (tmp_path / "run").exists()  # the probes ran in a scratch folder; nothing stored here


def test_the_h200_rates_read_the_measured_points() -> None:
    rate = projection.h200_rate
    assert rate("resnet18", 8) == pytest.approx(146.7) and rate("resnet18", 64) == pytest.approx(398.7)
    assert rate("resnet18", 36) == pytest.approx((146.7 + 398.7) / 2)  # linear between them
    assert rate("resnet18", 1) == pytest.approx(36.8)  # one victim alone: the one-by-one rate
    assert rate("resnet18", 4) == pytest.approx(36.8 + (146.7 - 36.8) * 3 / 7)
    assert rate("resnet18", 512) == pytest.approx(398.7)  # flat beyond the last
    assert rate("resnet18", 8, one_by_one_step=1) == pytest.approx(36.8)  # one victim at a time
    assert rate("resnet18", 64, one_by_one_step=64) == pytest.approx(398.7)  # capped by the vectorized
    assert rate("vit", 8) is None and rate("lenet", 8, one_by_one_step=1) is None


def test_the_projection_runs_each_cell_as_the_engine_would_on_the_card(npz, tmp_path, monkeypatch) -> None:
    """Fake CPU probes through the real preset: IG 80 s a cell (8 victims × 100 steps: 10 image·steps/s
    here) and its 8 victims together at 146.7 on the card; the batch of 64 (BatchNorm prior, train mode)
    one at a time at 398.7 and FedAvg's minibatches of 8 at 146.7, both at least their image·steps at
    that rate (the CPU's faster large batches not counted twice); the analytic imprint and APRIL at their
    CPU seconds; FL training and stage 2 at IG's pace."""
    from leakshield.leaderboard import dry_run

    cpu = {"ig": 80.0, "imprint": 1.0, "gradinversion": 50.0, "fedavg-leakage": 40.0, "april": 0.2}
    main = load_leaderboard("gpu", data_root=npz)
    scenarios = load_scenarios("gpu", data_root=npz)

    def fake_grids(jobs, device, cache, workers):
        parts = []
        for config in [main, *(c for _, c, _ in scenarios)]:
            attacks = {(m.display, a.display, ""): cpu[a.name] for m in config.models for a in config.attacks}
            cells = [c for c in expand_grid(config) if c.kind == "attack"]
            seconds = sum(cpu[c.attack.name] for c in cells) + 100.0  # 100 s of FL training and baselines
            parts.append(dry_run.GridPart("", seconds, False, 0, attacks))
        return parts

    monkeypatch.setattr(dry_run, "estimate_grids", fake_grids)
    monkeypatch.setattr(dry_run, "stage_two_bound", lambda config, attacks, fresh: (8, 200.0))
    found = projection.gpu_projection(None, npz, tmp_path / "run", tmp_path / "log")
    assert found["cpu rate (IG image·steps/s)"] == pytest.approx(10.0)
    slow = 10.0 / 146.7  # H200 seconds per CPU second at IG's pace (8 victims together)
    cells = len(main.defenses) * len(main.attack.rounds) * len(main.seeds)
    grids = found["grids"]
    assert grids["main grid"]["h200 s"] == pytest.approx(cells * (800 / 146.7 + 1.0) + 100 * slow, abs=0.1)
    assert grids["scenario gpu-batch"]["h200 s"] == pytest.approx(3 * 6400 / 398.7 + 100 * slow, abs=0.1)
    assert grids["scenario gpu-local-steps"]["h200 s"] == pytest.approx(
        3 * 1600 / 146.7 + 100 * slow, abs=0.1
    )
    assert grids["scenario gpu-vit"]["h200 s"] == pytest.approx(6 * 0.2 + 100 * slow, abs=0.1)
    assert found["not calibrated"] == ["main grid: imprint on resnet18-w64", "scenario gpu-vit: april on vit"]
    assert grids["stage 2 (bound)"]["h200 s"] == pytest.approx(200.0 * slow, abs=0.1)


@pytest.fixture
def fake_steps(monkeypatch):
    """The script's commands replaced by a recorder that answers with set exit statuses."""
    import subprocess

    answers: dict[str, int] = {}
    ran: list[str] = []

    def fake_run(command, **kwargs):
        name = command[2] if command[2] == "pytest" else command[3]  # python -m pytest | leakshield X
        name = "demo-cpu" if name == "demo" and "--threads" in command else name
        ran.append(name)
        return subprocess.CompletedProcess(command, answers.get(name, 0))

    monkeypatch.setattr(script.subprocess, "run", fake_run)
    monkeypatch.setattr(script, "environment", lambda check: check.record("environment", {}))
    return answers, ran


def test_the_steps_run_in_order_and_only_their_own_exit_statuses_pass(tmp_path, fake_steps) -> None:
    answers, ran = fake_steps
    argv = ["--tiny", "--only", "environment,preset,tests,demo", "--out"]
    assert script.main([*argv, str(tmp_path / "a")]) == 0
    assert ran == ["leaderboard", "pytest", "demo", "demo-cpu"]
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert "demo speed-up" in summary
    answers["leaderboard"] = 3  # cells left: the same command resumes them, no failure
    assert script.main([*argv, str(tmp_path / "b")]) == 0
    answers["pytest"] = 3  # for pytest, 3 is an internal error
    assert script.main([*argv, str(tmp_path / "c")]) == 1


def test_steps_without_the_time_they_need_are_skipped_and_said(tmp_path, fake_steps) -> None:
    _, ran = fake_steps
    assert script.main(["--tiny", "--deadline", "130", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert ran == ["pytest", "demo"]  # 130 s: the preset needs 150, the CPU demo (the ratio's other half) 180
    assert "skipped" in summary["preset"] and "skipped" in summary["demo on 2 CPU threads"]
    assert summary["left for another command"] == ["preset", "demo on 2 CPU threads"]
    ran.clear()
    argv = ["--tiny", "--only", "tests,demo", "--deadline", "30", "--out", str(tmp_path / "none")]
    assert script.main(argv) == 1  # nothing ran
    assert ran == []
    assert script.main(["--tiny", "--only", "environment", "--out", str(tmp_path / "env")]) == 0


def test_bad_arguments_are_one_line(tmp_path, capsys) -> None:
    for argv, said in ((["--tiny", "--only", "preset,tset"], "--only: tset"),
                       (["--tiny", "--deadline", "-5"], "must be above 0"),
                       (["--out", str(tmp_path)], "--data")):  # fmt: skip
        with pytest.raises(SystemExit):
            script.main(argv)
        assert said in capsys.readouterr().err
    if not __import__("torch").cuda.is_available():
        with pytest.raises(SystemExit):
            script.main(["--data", "x.npz", "--out", str(tmp_path)])
        assert "no CUDA device here" in capsys.readouterr().err


def test_the_synthetic_file_has_the_cifar10_layout(tmp_path) -> None:
    with np.load(script.synthetic_npz(tmp_path / "x.npz")) as data:
        assert data["images"].shape == (128, 32, 32, 3) and data["images"].dtype == np.uint8
        assert sorted(set(data["labels"].tolist())) == list(range(10))
