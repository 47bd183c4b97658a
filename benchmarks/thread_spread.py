"""How far 1 and 2 CPU threads move a grid's numbers: the same config run twice (``leakshield run
--threads 1`` and ``--threads 2``, side by side in one invocation), and per metric the largest absolute
difference, split into cells on the untrained model (baseline, round-0 attacks) and cells after FL
training (utility, later rounds), per model.

    python benchmarks/thread_spread.py benchmarks/thread_spread.yaml
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from leakshield.experiment import ResultStore

METRICS = ("accuracy", "accuracy_train", "ssim", "psnr", "mse", "asr")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        stores = {}
        for threads in (1, 2):
            out = Path(tmp) / f"t{threads}"
            command = [sys.executable, "-m", "leakshield", "run", str(args.config), "--out", str(out)]
            subprocess.run([*command, "--threads", str(threads), "--quiet", "--no-report"], check=True)
            stores[threads] = {r.key: r for r in ResultStore(out / "results.sqlite").records()}
    spread: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for key, one in stores[1].items():
        two = stores[2][key]
        coords = json.loads(key)
        untrained = coords["kind"] == "baseline" or (coords["kind"] == "attack" and coords["round"] == 0)
        group = ("untrained" if untrained else "trained", str(coords["model"]))
        for metric in METRICS:
            a, b = one.metrics.get(metric), two.metrics.get(metric)
            if isinstance(a, float) and isinstance(b, float):
                spread[group][metric] = max(spread[group][metric], abs(a - b))
    for (kind, model), values in sorted(spread.items()):
        shown = ", ".join(f"{m} {v:.3g}" for m, v in values.items())
        print(f"{kind:<10} {model:<40} max |Δ| 1 vs 2 threads: {shown}")


if __name__ == "__main__":
    main()
