"""What a GPU buys, measured in one run on a lent card (docs/speed-and-scale.md, "On a GPU").

Sections, each timed and each skipped once ``--deadline`` seconds have passed (most important first):

- ``tests``: ``pytest -m gpu`` (the GPU checks of tests/test_gpu.py);
- ``demo``: ``leakshield demo --device cuda`` end to end, wall seconds (the README gives 2 CPU cores');
- ``table``: IG victims·steps per second (v·s/s) on untrained 32-px digits victims: a plain research
  loop (benchmarks/attack_throughput.py's) against leakshield's paths, LeNet with 16, 1,024 and 4,096
  victims and ResNet-18 with 8 and 64, ``path: loop`` beside the plain loop, compiled steps with and
  without CUDA graphs;
- ``idlg``: the demo's iDLG victims (LeNet, 8) compiled with and without CUDA graphs, batched
  L-BFGS's bookkeeping on the device (the default) and on the host, eager, and by ``path: auto``
  (calibration and compilation included): evaluation rounds per second;
- ``straggler``: the demo's iDLG victims at the full 300 outer steps, ``path: auto``, with no evaluation
  budget and with ``lbfgs_max_evaluations`` 2,000: seconds, each victim's evaluations, PSNR;
- ``tf32``: the same IG attacks in float32 and in TF32: seconds, PSNR and SSIM;
- ``memory``: ResNet-18, 64 victims, under a 24 GiB card emulated by the process memory fraction:
  the chunk, the peak memory, and the largest difference from the unlimited run.

    python benchmarks/gpu_speed.py --device cuda --out gpu_speed.json [--only demo,table] [--deadline 480]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from attack_throughput import plain_ig

from leakshield.attacks import create_attack
from leakshield.data import load_dataset
from leakshield.fl import server_view_of
from leakshield.matmul_precision import set_matmul_precision
from leakshield.metrics import psnr, ssim
from leakshield.models import create_model

RESULTS: dict[str, object] = {}
SMOKE = False  # --smoke: every section at toy sizes on the CPU, to check the script before a lease


def say(key: str, value: object) -> None:
    RESULTS[key] = value
    print(f"{key}: {json.dumps(value)}", flush=True)


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def sized(count: int, steps: int) -> tuple[int, int]:
    return (min(count, 3), 2) if SMOKE else (count, steps)


def peak_gib() -> float | None:
    return torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None


def reset_peak() -> None:
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def victims(model_name: str, count: int, device: torch.device):
    """``count`` one-image victims of one untrained model (digits cycled when there are fewer)."""
    data = load_dataset("digits", {"channels": 3, "size": 32})
    torch.manual_seed(0)
    model = create_model(model_name, None, in_shape=data.info.shape, num_classes=10).eval().to(device)
    train = data.train
    index = [i % len(train) for i in range(count)]
    views = [server_view_of(model, train.subset([i]).to(device), data.info, labels_known=True) for i in index]
    return views, train.x[index]


def ig(steps: int, **extra) -> object:
    return create_attack("ig", {"iterations": steps, "labels": "known", **extra})


def timed_many(attack, views, warm_steps: int = 2, **warm) -> tuple[float, list]:
    """Seconds of ``attack`` on ``views`` after a short warm-up on the same shapes (compilation and
    calibration out of the figure)."""
    p = attack.params
    warmup = create_attack("ig", {**p.model_dump(), "iterations": warm_steps, **warm})
    warmup.execution = attack.execution
    start = time.perf_counter()
    warmup.reconstruct_many(views, seeds=list(range(len(views))))
    sync()
    RESULTS.setdefault("warm-up seconds", []).append(time.perf_counter() - start)  # type: ignore[union-attr]
    start = time.perf_counter()
    out = attack.reconstruct_many(views, seeds=list(range(len(views))))
    sync()
    return time.perf_counter() - start, out


def quality(out, truth) -> dict[str, float]:
    images = torch.cat([r.images for r in out])
    return {"psnr": float(psnr(images, truth).mean()), "ssim": float(ssim(images, truth).mean())}


def section_tests() -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "gpu",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:warnings",
            "--tb=short",
            "tests/test_gpu.py",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    say("tests", {"rc": run.returncode, "tail": run.stdout[-4000:] + run.stderr[-500:]})


def section_demo(out: Path) -> None:
    start = time.perf_counter()
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "leakshield",
            "demo",
            "--device",
            "cuda",
            "--quiet",
            "--out",
            str(out / "demo"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    say("demo", {"seconds": time.perf_counter() - start, "rc": run.returncode, "tail": run.stdout[-600:]})
    import sqlite3

    from leakshield.experiment.rundir import STORE_FILE

    with sqlite3.connect(out / "demo" / STORE_FILE) as db:
        rows = db.execute("SELECT kind, attack, seconds, metrics, victims FROM cells").fetchall()
    say("demo cells", [(k, a, sec, metrics[:300], victims[:900]) for k, a, sec, metrics, victims in rows])


def plain_rate(views, steps: int) -> float:
    plain_ig(views[0], 2, 0)  # warm-up
    sync()
    start = time.perf_counter()
    for k, view in enumerate(views):
        plain_ig(view, steps, k)
    sync()
    return len(views) * steps / (time.perf_counter() - start)


def section_table(device: torch.device, only: str | None) -> None:
    rows = [  # model, victims, steps, paths, plain loop victims (None: not run)
        ("lenet", 16, 200, ("vectorized", "compiled", "compiled-without-graphs"), 16),
        ("resnet18", 8, 20, ("vectorized", "loop"), 8),
        ("lenet", 1024, 200, ("vectorized", "compiled", "compiled-without-graphs"), None),
        ("lenet", 4096, 100, ("vectorized",), None),
        ("resnet18", 64, 10, ("vectorized",), None),
    ]
    for model_name, count, steps, paths, plain_victims in rows:
        if only and f"{model_name}:{count}" not in only.split(","):
            continue
        count, steps = sized(count, steps)
        plain_victims = plain_victims and min(plain_victims, count)
        views, truth = victims(model_name, count, device)
        row: dict[str, object] = {"victims": count, "steps": steps}
        if plain_victims:
            row["plain_vs_per_s"] = plain_rate(views[:plain_victims], steps)
        for path in paths:
            reset_peak()
            settings = {"path": "compiled", "cuda_graphs": False} if "without" in path else {"path": path}
            seconds, out = timed_many(ig(steps, **settings), views)
            row[f"{path}_vs_per_s"] = count * steps / seconds
            row[f"{path}_peak_gib"] = peak_gib()
            row[f"{path}_chunk"] = out[0].stats.get("chunk")
            row[f"{path}_psnr"] = quality(out, truth)["psnr"]
        say(f"table {model_name} {count}", row)
        del views
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def section_idlg(device: torch.device, iterations: int) -> None:
    count, iterations = sized(8, iterations)
    views, truth = victims("lenet", count, device)
    for where, path, graphs in (
        ("device", "compiled", True),
        ("device", "compiled", False),
        ("host", "compiled", True),
        ("device", "vectorized", False),
        ("device", "auto", True),
    ):
        settings = {"lbfgs_bookkeeping": where, "path": path, "cuda_graphs": graphs}
        attack = create_attack("idlg", {"iterations": iterations, **settings})
        create_attack("idlg", {**settings, "iterations": 1}).reconstruct_many(views, seeds=list(range(count)))
        sync()
        start = time.perf_counter()
        out = attack.reconstruct_many(views, seeds=list(range(count)))
        sync()
        seconds = time.perf_counter() - start
        evaluations = [r.stats["evaluations"] for r in out]
        say(
            f"idlg bookkeeping {where} {path}{' cuda graphs' if graphs and path != 'vectorized' else ''}",
            {
                "iterations": iterations,
                "seconds": seconds,
                "evaluations": evaluations,
                "evaluation_rounds_per_s": max(evaluations) / seconds,
                "path": out[0].stats.get("path"),
                "calibration": {k: v for k, v in out[0].stats.items() if k.startswith("calibration")},
                **quality(out, truth),
            },
        )


def section_straggler(device: torch.device) -> None:
    count, iterations = sized(8, 300)
    views, truth = victims("lenet", count, device)
    for budget in (None, 2000):
        settings = {"iterations": iterations, "lbfgs_max_evaluations": budget, "path": "auto"}
        start = time.perf_counter()
        out = create_attack("idlg", settings).reconstruct_many(views, seeds=list(range(count)))
        sync()
        say(
            f"straggler budget {budget}",
            {
                "seconds": time.perf_counter() - start,
                "evaluations": [r.stats["evaluations"] for r in out],
                "budget_hit": [r.stats.get("evaluation_budget_hit") for r in out],
                "path": out[0].stats.get("path"),
                "psnr_each": [float(psnr(r.images, t[None])) for r, t in zip(out, truth, strict=True)],
                **quality(out, truth),
            },
        )


def section_tf32(device: torch.device) -> None:
    for model_name, count, steps in (("lenet", 16, 300), ("resnet18", 8, 50)):
        count, steps = sized(count, steps)
        views, truth = victims(model_name, count, device)
        for precision in ("float32", "tf32"):
            set_matmul_precision(precision)
            seconds, out = timed_many(ig(steps, path="vectorized"), views)
            say(f"tf32 {model_name} {precision}", {"seconds": seconds, **quality(out, truth)})
        set_matmul_precision("float32")


def section_memory(device: torch.device) -> None:
    views, _ = victims("resnet18", 64, device)
    attack = ig(3, path="vectorized")
    torch.cuda.reset_peak_memory_stats()
    _, whole = timed_many(attack, views, warm_steps=1)
    peak = torch.cuda.max_memory_allocated() / 2**30
    total = torch.cuda.get_device_properties(device).total_memory
    torch.cuda.empty_cache()
    index = device.index if device.index is not None else torch.cuda.current_device()
    torch.cuda.set_per_process_memory_fraction(24 * 2**30 / total, index)
    try:
        torch.cuda.reset_peak_memory_stats()
        _, limited = timed_many(attack, views, warm_steps=1)
        limited_peak = torch.cuda.max_memory_allocated() / 2**30
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, index)
    difference = max(float((a.images - b.images).abs().max()) for a, b in zip(whole, limited, strict=True))
    say(
        "memory resnet18 64 victims",
        {
            "unlimited": {"chunk": whole[0].stats["chunk"], "peak_gib": peak},
            "emulated_24_gib": {"chunk": limited[0].stats["chunk"], "peak_gib": limited_peak},
            "bytes_per_victim": whole[0].stats.get("calibration_bytes_per_victim"),
            "max_image_difference": difference,
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, default=Path("gpu_speed.json"))
    parser.add_argument("--only", default="tests,demo,idlg,straggler,tf32,memory,table")
    parser.add_argument("--deadline", type=float, default=480.0, help="skip sections started after this")
    parser.add_argument("--idlg-iterations", type=int, default=40)
    parser.add_argument("--rows", default=None, help="table rows to run, e.g. lenet:1024,lenet:4096")
    parser.add_argument("--demo-out", type=Path, default=Path("/tmp/leakshield-gpu-demo"))
    parser.add_argument("--smoke", action="store_true", help="toy sizes on the CPU (checks the script)")
    args = parser.parse_args()
    global SMOKE
    SMOKE = args.smoke
    device = torch.device("cpu" if SMOKE else args.device)
    if not SMOKE and (device.type != "cuda" or not torch.cuda.is_available()):
        raise SystemExit("gpu_speed.py measures a CUDA device: none is available here (--smoke checks it)")
    began = time.perf_counter()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    say("device", {"name": name, "torch": torch.__version__,
                   "cuda": torch.version.cuda, "cores": os.cpu_count()})  # fmt: skip
    sections = {
        "tests": section_tests,
        "demo": lambda: section_demo(args.demo_out),
        "table": lambda: section_table(device, args.rows),
        "idlg": lambda: section_idlg(device, args.idlg_iterations),
        "straggler": lambda: section_straggler(device),
        "tf32": lambda: section_tf32(device),
        "memory": lambda: section_memory(device),
    }
    for name in args.only.split(","):
        if time.perf_counter() - began > args.deadline:
            say(f"skipped {name}", {"after_s": time.perf_counter() - began})
            continue
        start = time.perf_counter()
        try:
            sections[name]()
        except Exception:  # a failing section must not lose the others' numbers
            say(f"failed {name}", traceback.format_exc(limit=6))
        say(f"section {name} seconds", time.perf_counter() - start)
        args.out.write_text(json.dumps(RESULTS, indent=1))
    args.out.write_text(json.dumps(RESULTS, indent=1))


if __name__ == "__main__":
    main()
