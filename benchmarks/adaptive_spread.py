"""Run-to-run spread of adaptive attacks against their plain counterpart, the numbers behind the margins
of tests/test_defense_effects.py (a margin below an attack's own spread makes a flaky test).

For each pair the probe of the tests is repeated over seeds (each seed redraws the defense's randomness
and the attack's starts; victims 0 and 7, untrained tanh LeNet unless the pair says otherwise, budget
500 steps for both attacks) and the per-seed difference adaptive − plain is reported with its mean,
standard deviation and minimum. Fitted defenses and attacks (LODA, loda-inverse) fit once, with seed 0,
into the user's artifact cache.

    python benchmarks/adaptive_spread.py --seeds 6
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass, field

import torch

from leakshield.data import load_dataset
from leakshield.experiment.probe import probe_attack

TANH_LENET = {"activation": "tanh", "init_range": None}


@dataclass(frozen=True)
class Pair:
    """An adaptive attack and its plain counterpart against one defense stack, scored alike."""

    defenses: list[tuple[str, dict]]
    adaptive: str
    params: dict = field(default_factory=dict)
    plain: str = "ig"
    model: str = "lenet"
    model_params: dict = field(default_factory=lambda: TANH_LENET)
    #: ``private``: SSIM to the private images; ``defended``: to the defended inputs x' (ATS's target)
    against: str = "private"


PAIRS = {
    "laplacian-noise 0.01: noise-aware vs ig": Pair([("laplacian-noise", {"scale": 0.01})], "noise-aware"),
    "dropout 0.5: dropout-expectation (4 masks) vs ig": Pair(
        [("dropout", {})], "dropout-expectation", {"dropout_samples": 4}
    ),
    "dropout 0.5: dropout-mask vs ig": Pair([("dropout", {})], "dropout-mask"),
    "pruning 0.9: pruning-aware vs ig": Pair([("pruning", {"ratio": 0.9})], "pruning-aware"),
    "soteria: soteria-bypass vs ig": Pair([("soteria", {})], "soteria-bypass"),
    "loda (c 20, 100 steps): loda-inverse vs ig": Pair([("loda", {"steps": 100})], "loda-inverse"),
    "dcs2 (all sensitive): dcs2-extra vs ig": Pair([("dcs2", {"sensitive": "all"})], "dcs2-extra"),
    "dcs2 (all sensitive): dcs2-prior vs ig": Pair([("dcs2", {"sensitive": "all"})], "dcs2-prior"),
    "ats 3 (translate): ats-pinned vs ig, SSIM to x'": Pair(
        [("ats", {"policies": "3"})], "ats-pinned", against="defended"
    ),
    "precode (MLP 16): precode-expectation vs ig": Pair(
        [("precode", {})], "precode-expectation", model="mlp", model_params={"width": 16}
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--only", default=None, help="substring of the pairs to run")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    digits = load_dataset("digits", {"channels": 3, "size": 32})
    for label, pair in PAIRS.items():
        if args.only and args.only not in label:
            continue
        plain, adapted = [], []
        for seed in range(args.seeds):
            common = {"model": pair.model, "model_params": pair.model_params, "seed": seed}
            budget = {"iterations": args.iterations}
            for attack, params, into in ((pair.plain, {}, plain), (pair.adaptive, pair.params, adapted)):
                result = probe_attack(digits, pair.defenses, attack, {**budget, **params}, **common)
                into.append(result.ssim if pair.against == "private" else result.ssim_defended)
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
