"""Run-to-run spread of adaptive attacks against their plain counterpart, the numbers behind the margins
of tests/test_defense_effects.py (a margin below an attack's own spread makes a flaky test).

For each pair the probe of the tests is repeated over seeds (each seed redraws the defense's randomness
and the attack's starts; victims 0 and 7, untrained tanh LeNet, IG budget 500 steps) and the per-seed
difference adaptive − plain is reported with its mean, standard deviation and minimum.

    python benchmarks/adaptive_spread.py --seeds 6
"""

from __future__ import annotations

import argparse
import statistics

import torch

from leakshield.data import load_dataset
from leakshield.experiment.probe import probe_attack

TANH_LENET = {"activation": "tanh", "init_range": None}
PAIRS = {
    "laplacian-noise 0.01: noise-aware vs ig": ([("laplacian-noise", {"scale": 0.01})], "noise-aware", {}),
    "dropout 0.5: dropout-expectation (4 masks) vs ig": (
        [("dropout", {})],
        "dropout-expectation",
        {"dropout_samples": 4},
    ),
    "dropout 0.5: dropout-mask vs ig": ([("dropout", {})], "dropout-mask", {}),
    "pruning 0.9: pruning-aware vs ig": ([("pruning", {"ratio": 0.9})], "pruning-aware", {}),
    "soteria: soteria-bypass vs ig": ([("soteria", {})], "soteria-bypass", {}),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--only", default=None, help="substring of the pairs to run")
    args = parser.parse_args()
    torch.set_num_threads(2)
    digits = load_dataset("digits", {"channels": 3, "size": 32})
    for label, (defenses, adaptive, params) in PAIRS.items():
        if args.only and args.only not in label:
            continue
        plain, adapted = [], []
        for seed in range(args.seeds):
            common = {"model_params": TANH_LENET, "seed": seed}
            budget = {"iterations": args.iterations}
            plain.append(probe_attack(digits, defenses, "ig", budget, **common).ssim)
            adapted.append(probe_attack(digits, defenses, adaptive, {**budget, **params}, **common).ssim)
        diffs = [a - p for a, p in zip(adapted, plain, strict=True)]
        print(f"{label}  ({args.seeds} seeds)")
        print(f"  plain    SSIM {statistics.fmean(plain):.3f} ± {statistics.stdev(plain):.3f}  {plain}")
        print(f"  adaptive SSIM {statistics.fmean(adapted):.3f} ± {statistics.stdev(adapted):.3f}  {adapted}")
        print(
            f"  adaptive − plain: mean {statistics.fmean(diffs):+.3f}, std {statistics.stdev(diffs):.3f}, "
            f"min {min(diffs):+.3f}, max {max(diffs):+.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
