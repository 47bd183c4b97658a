"""The device check of a short GPU lend, in one command (docs/leaderboard.md, "The gpu preset").

Steps, in this order (the most important first), each logged under ``--out``; a step starts only when
the time it needs is left before ``--deadline`` (seconds from the start), and the leaderboard is stopped
in time:

1. ``environment.json``: torch, CUDA and the card, the commit, the CPU count;
2. the ``gpu`` leaderboard preset: ``leakshield leaderboard --preset gpu --data-root DATA --device cuda
   --out RUN --stop-after M`` (``leaderboard.log``; exit status 3: cells are left, and the same command
   resumes them), then RUN packed into ``run.tar.gz`` (its store, exports and pages; ``--resume`` unpacks
   an earlier command's archive first, so a fresh machine goes on where the last one stopped);
3. ``pytest -m gpu`` (tests/test_gpu.py): ``pytest-gpu.log``;
4. the demo's wall time on the device and on two CPU threads, the same day on the same machine
   (``leakshield demo --device cuda`` and ``--device cpu --threads 2``) and their ratio.

A preset that fills the command leaves the tests and the demos to a second command (``--only
tests,demo``), listed under "left for another command". Everything it found is in ``summary.json``.
``--dry`` runs nothing on a device: it prints the plan, the preset's dry run on this CPU and each kind
of cell projected on an H200 from IG's rates measured there
(:func:`gpu_projection`).

    python benchmarks/gpu_preset.py --data cifar10.npz --out "$OUT" [--resume run.tar.gz] [--deadline 540]
    python benchmarks/gpu_preset.py --dry --out /tmp/check     # the plan and the preset's CPU estimate
    python benchmarks/gpu_preset.py --tiny --out /tmp/check    # every step at toy sizes on the CPU
    python benchmarks/gpu_preset.py --dry --tiny --out /tmp/check   # the plan and the toy preset's estimate

``--tiny`` runs the preset shrunk (:func:`tiny_leaderboard`: 2 seeds, 2 victims, 2-step attacks, width-4
models at 16 px, 1 training round, a synthetic .npz) and the quick demo, on the CPU: the check the test
suite runs before a lend, so that the lend itself finds a script that works.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from gpu_projection import ProjectionError, gpu_projection

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "src" / "leakshield" / "configs" / "leaderboard.yaml"
#: the script's seconds: the device's 10-minute command, less a margin
DEADLINE = 540.0
#: the leaderboard's share of the command at most, in minutes (it finishes the running cell after it)
STOP_AFTER = 7.5
#: the steps, in the order they run: the most important first (what a short lend exists for)
STEPS = ("environment", "preset", "tests", "demo")
#: seconds a step needs left to start: ``pytest -m gpu`` (tests/test_gpu.py; not timed on a card yet),
#: the demo on the card (83.8 s measured on an H200) and on two CPU threads (134.5 s on two cores)
EXPECTED = {"tests": 120.0, "demo": 120.0, "demo-cpu": 180.0}
#: what the preset needs after its --stop-after: the running cell, the reports, the archive
PRESET_TAIL = 90.0


def tiny_leaderboard(shipped: Path = SHIPPED) -> dict[str, Any]:
    """The shipped leaderboard file with its ``gpu`` preset and scenarios shrunk to seconds on a CPU:
    2 seeds (the rankings' minimum), 2 victims and 2 fresh ones, 2-step attacks, width-4 ResNet-18 and
    a 1-block ViT at 16 px, one training round; the protocol (defenses, attacks, rungs, threat tables,
    stage 2, scenarios) as in the preset."""
    document = yaml.safe_load(shipped.read_text())
    preset = document["presets"]["gpu"]
    preset.update(seeds=[0, 1], victims={"count": 2, "sensitive": None}, stage2={"victims": 2})
    preset["utility"] = {"rounds": 1, "seeds": [0]}
    preset["attack"] = {**preset["attack"], "rounds": [0, 1]}
    preset["dataset"] = {**preset["dataset"], "size": 16}
    preset["models"] = [{"name": "resnet18", "label": "resnet18-w64", "width": 4}]
    preset["params"] = {name: {"iterations": 2} for name in preset["params"]}
    for name in preset["scenarios"]:
        scenario = document["scenarios"][name]
        scenario["seeds"] = [0]
        if "models" in scenario:
            scenario["models"] = [{"name": "vit", "dim": 16, "depth": 1, "heads": 1}]
        if "axes" in scenario:
            scenario["axes"] = {"batch_size": scenario["axes"]["batch_size"][:1]}
    return document


def synthetic_npz(path: Path, count: int = 128, seed: int = 0) -> Path:
    """``count`` 32×32 colour images in the CIFAR-10 .npz layout (uint8 N×32×32×3, int64 labels, every
    class): smooth random patterns, for the tiny run (not photographs)."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, size=(count, 4, 4, 3)).astype(np.float32)
    images = np.repeat(np.repeat(coarse, 8, axis=1), 8, axis=2).astype(np.uint8)
    labels = np.arange(count, dtype=np.int64) % 10
    np.savez(path, images=images, labels=labels)
    return path


class Check:
    """The steps' shared state: where they write, the deadline, what they found."""

    def __init__(self, out: Path, deadline: float, device: str) -> None:
        self.out, self.device, self.start = out, device, time.monotonic()
        self.deadline = deadline
        self.summary: dict[str, Any] = {}
        out.mkdir(parents=True, exist_ok=True)

    def left(self) -> float:
        return self.deadline - (time.monotonic() - self.start)

    def record(self, key: str, value: Any) -> None:
        self.summary[key] = value
        print(f"{key}: {json.dumps(value)}", flush=True)
        (self.out / "summary.json").write_text(json.dumps(self.summary, indent=1))

    def run(
        self, name: str, command: list[str], log: str, *, need: float = 0.0, ok: tuple[int, ...] = (0,)
    ) -> int | None:
        """Run ``command`` with its output in ``log`` (``ok``: the exit statuses that are no failure);
        None (skipped, said) when less than ``need`` seconds are left before the deadline."""
        if self.left() < max(need, 1.0):
            self.record(
                name, {"skipped": f"{self.left():.0f} s left before the deadline, {need:.0f} s needed"}
            )
            return None
        started = time.monotonic()
        with (self.out / log).open("w") as handle:
            handle.write("$ " + " ".join(command) + "\n")
            handle.flush()
            done = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, cwd=ROOT, check=False)
        seconds = round(time.monotonic() - started, 1)
        self.record(
            name, {"exit": done.returncode, "ok": done.returncode in ok, "seconds": seconds, "log": log}
        )
        return done.returncode


def environment(check: Check) -> None:
    import torch

    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT, check=False
    )
    found = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "commit": commit.stdout.strip() or None,
    }
    (check.out / "environment.json").write_text(json.dumps(found, indent=1))
    check.record("environment", found)


def leaderboard_command(args: argparse.Namespace, run: Path, config: Path | None, data: Path) -> list[str]:
    command = [sys.executable, "-m", "leakshield", "leaderboard", "--preset", "gpu", "--data-root", str(data),
               "--device", args.device, "--out", str(run), "--quiet"]  # fmt: skip
    command += ["--config", str(config)] if config is not None else []
    return command + (["--threads", "1"] if args.tiny else [])  # a toy run beside other work: one thread


def pack(run: Path, archive: Path) -> None:
    """``run`` (the store, exports, pages and their images) as one .tar.gz, to bring home and resume."""
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(run, arcname="run")


def _under_run(name: Path) -> bool:
    return not name.is_absolute() and ".." not in name.parts and name.parts[:1] == ("run",)


def unpack(archive: Path, run: Path) -> None:
    """An earlier command's archive (:func:`pack`'s: everything under ``run/``) into ``run``; links,
    devices and members outside ``run/`` are refused."""
    with tarfile.open(archive, "r:gz") as tar:
        members = tar.getmembers()
        bad = [m.name for m in members if not (m.isfile() or m.isdir()) or not _under_run(Path(m.name))]
        if bad or not members:
            raise SystemExit(f"--resume {archive}: not a run archive of this script ({bad[:1] or 'empty'})")
        scratch = run.parent / ".resume"
        shutil.rmtree(scratch, ignore_errors=True)
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # and checked above
        tar.extractall(scratch, members=members, **safe)
    (scratch / "run").rename(run)
    scratch.rmdir()


def positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text}: must be above 0")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-preset")))
    parser.add_argument("--data", type=Path, default=None, help="the CIFAR-10 .npz (images, labels)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--deadline", type=positive, default=DEADLINE, help="the script's seconds")
    parser.add_argument("--stop-after", type=positive, default=STOP_AFTER, help="the leaderboard's minutes")
    parser.add_argument("--resume", type=Path, default=None, help="an earlier command's run.tar.gz")
    parser.add_argument("--only", default=",".join(STEPS), help=f"steps to run, of {', '.join(STEPS)}")
    parser.add_argument("--dry", action="store_true", help="the plan and the preset's dry run on the CPU")
    parser.add_argument("--tiny", action="store_true", help="every step (or the dry run) at toy sizes")
    args = parser.parse_args(argv)
    steps = [step for step in args.only.split(",") if step]
    unknown = sorted(set(steps) - set(STEPS))
    if unknown:
        parser.error(f"--only: {', '.join(unknown)}; the steps: {', '.join(STEPS)}")
    lend_device = args.device
    if args.dry or args.tiny:
        args.device = "cpu"
    else:
        import torch

        if args.device.startswith("cuda") and not torch.cuda.is_available():
            parser.error(
                f"--device {args.device}: no CUDA device here (--tiny or --dry check the script on a CPU)"
            )
    out = args.out.expanduser().resolve()
    check = Check(out, args.deadline, args.device)
    config = None
    if args.tiny:
        config = out / "leaderboard-tiny.yaml"
        config.write_text(yaml.safe_dump(tiny_leaderboard(), sort_keys=False))
    data = args.data or (synthetic_npz(out / "cifar10.npz") if args.tiny or args.dry else None)
    if data is None:
        parser.error("--data: the CIFAR-10 .npz to run the preset on (or --tiny / --dry)")
    data, run = data.expanduser().resolve(), out / "run"
    board = leaderboard_command(args, run, config, data)
    if "environment" in steps:
        environment(check)
    if args.dry:  # what a lend would run, and the estimate of the preset at its real size
        lend = " ".join(board[2:]).replace("--device cpu", f"--device {lend_device}")
        demos = [f"leakshield demo --device {lend_device}", "leakshield demo --device cpu --threads 2"]
        check.record("plan", {"tests": "python -m pytest -m gpu -q", "preset": lend, "demo": demos})
        if args.data is None:
            check.record("data", "synthetic patterns, not photographs: give --data for the real images")
        started = time.monotonic()
        # a run folder of its own: no cell stored in OUT/run hides a kind from the probes
        with tempfile.TemporaryDirectory() as scratch:
            try:
                projection = gpu_projection(config, data, Path(scratch) / "run", out / "dry-run.log")
            except ProjectionError as exc:
                check.record("dry run", {"error": str(exc)})
                return 1
        check.record("dry run", {"seconds": round(time.monotonic() - started, 1), "log": "dry-run.log"})
        check.record("H200 projection", projection)
        return 0
    if "preset" in steps:
        if args.resume is not None and run.exists():
            check.record("resume", f"{run} exists: went on from it, --resume {args.resume} not unpacked")
        elif args.resume is not None:
            unpack(args.resume, run)
        minutes = min(args.stop_after, (check.left() - PRESET_TAIL) / 60.0)
        status = check.run("preset", [*board, "--stop-after", f"{max(minutes, 0.01):.2f}"], "leaderboard.log",
                           need=PRESET_TAIL + 60.0, ok=(0, 3))  # fmt: skip
        if status is not None and run.exists():
            archive = out / "run.tar.gz"
            pack(run, archive)
            mib = round(archive.stat().st_size / 2**20, 2)
            check.record("archive", {"file": archive.name, "mib": mib, "cells left": status == 3})
    if "tests" in steps:
        tests = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:randomly", "tests/test_gpu.py"]
        check.run("pytest -m gpu", tests, "pytest-gpu.log", need=EXPECTED["tests"])
    if "demo" in steps:
        demo = [sys.executable, "-m", "leakshield", "demo", *(["--quick"] if args.tiny else []), "--quiet"]
        on_device = [*demo, "--device", args.device, "--out", str(out / "demo-device")]
        on_cpu = [*demo, "--device", "cpu", "--threads", "2", "--out", str(out / "demo-cpu")]
        if check.run("demo on the device", on_device, "demo-device.log", need=EXPECTED["demo"]) == 0:
            check.run("demo on 2 CPU threads", on_cpu, "demo-cpu.log", need=EXPECTED["demo-cpu"])  # the ratio
    device, cpu = (check.summary.get(k) or {} for k in ("demo on the device", "demo on 2 CPU threads"))
    if device.get("exit") == 0 and cpu.get("exit") == 0:
        check.record("demo speed-up", round(cpu["seconds"] / max(device["seconds"], 1e-9), 2))
    ran = [v for v in check.summary.values() if isinstance(v, dict) and "exit" in v]
    left = [k for k, v in check.summary.items() if isinstance(v, dict) and "skipped" in v]
    if left:  # a short lend: the rest in another command (--resume for the preset)
        check.record("left for another command", left)
    return 0 if (ran or "environment" in check.summary) and all(v["ok"] for v in ran) else 1


if __name__ == "__main__":
    sys.exit(main())
