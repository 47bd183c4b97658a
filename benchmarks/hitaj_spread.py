"""Seed spread of the GAN attack of Hitaj et al. against its control, the numbers behind the margins of
tests/test_hitaj_margin.py: does the attacker's generator learn the victims' classes *from the
federation* (class-level SSIM above ``hitaj-control``, the same attacker in a federation whose victims'
updates never reach the server), active and passive alike?

One tiny grid per seed (digits 16 px, two clients split by class, the attacker holds 5–9 and targets
0–4; honest FedAvg rounds, then the attacker's rounds), each cell scored by class-level SSIM against the
victim's private images of the target classes. Prints per seed and per attack, and the differences.

    python benchmarks/hitaj_spread.py --seeds 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_hitaj_margin import class_ssim_by_attack  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    seeds = list(range(args.seeds))
    with tempfile.TemporaryDirectory() as tmp:
        found = class_ssim_by_attack(seeds, Path(tmp))
    for name, values in found.items():
        row = [values[s] for s in seeds]
        print(f"{name:<22} class-SSIM {statistics.fmean(row):.3f} ± {statistics.stdev(row):.3f}  "
              + " ".join(f"{v:.3f}" for v in row))  # fmt: skip
    for attack, control in (("hitaj", "hitaj-control"), ("hitaj-passive", "hitaj-passive-control")):
        diffs = [found[attack][s] - found[control][s] for s in seeds]
        spread = f"std {statistics.stdev(diffs):.3f}, min {min(diffs):+.3f}, max {max(diffs):+.3f}"
        print(f"{attack} − {control}: mean {statistics.fmean(diffs):+.3f}, {spread}")


if __name__ == "__main__":
    main()
