"""Cost per client of each condensation baseline (measurements, never asserted), in one run: the client
fit of DC, DSA, DM, DP-MERF and GS-WGAN at the budgets of configs/condensation.yaml (or ``--scale`` times
them) on one client of that config (half the digits training split, 16×16 grey), each timed from scratch
(no cache), with the time per iteration so the papers' full budgets can be extrapolated.

    python benchmarks/condensation_cost.py [--scale 1.0] [--methods dc dsa dm dp-merf gs-wgan]
        [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import time

import torch

from leakshield.artifacts import FitData
from leakshield.data import load_dataset
from leakshield.defenses import create_defense

#: (name, the config's parameters, the budget field, the papers' budget)
METHODS = (
    ("dc", {"ipc": 10, "width": 32, "iterations": 20}, "iterations", 1000),
    ("dsa", {"ipc": 10, "width": 32, "iterations": 20}, "iterations", 1000),
    ("dm", {"ipc": 10, "width": 32, "iterations": 1000}, "iterations", 20000),
    ("dp-merf", {"ipc": 10, "steps": 2000}, "steps", 2000),
    ("gs-wgan", {"ipc": 10, "pretrain_steps": 50, "max_steps": 600}, "max_steps", None),
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiply every budget (e.g. 0.1 for a quick look)"
    )
    parser.add_argument("--methods", nargs="+", default=[m[0] for m in METHODS], help="a subset to time")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    data = load_dataset("digits", {"channels": 1, "size": 16})
    client = data.train.subset(list(range(0, len(data.train), 2)))
    name = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"CPU, {torch.get_num_threads()} threads"
    )
    print(f"device: {name}; one client of {len(client)} images")
    for method, params, field, paper in METHODS:
        if method not in args.methods:
            continue
        budget = max(1, round(params[field] * args.scale))
        defense = create_defense(method, {**params, field: budget})
        begin = time.perf_counter()
        artifact = defense.fit(FitData(data.info, client.to(device), None, 0, device))
        seconds = time.perf_counter() - begin
        per = seconds / budget
        extra = f"; the paper's {paper} would take ≈ {per * paper / 60:.0f} min" if paper else ""
        eps = artifact.metadata.get("epsilon")
        spent = f", ε {eps:.2f}" if eps is not None else ""
        print(
            f"{method:8s} {budget:6d} {field:10s} {seconds:8.1f} s ({1000 * per:.0f} ms each{extra}){spent}"
        )


if __name__ == "__main__":
    main()
