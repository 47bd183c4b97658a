"""CENSOR (Zhang et al., NDSS 2025) measured: what IG and the adaptive ``censor-aware`` attack recover,
and whether a model trains on CENSOR's releases.

Leakage: digits at 32×32×3, untrained tanh LeNet (the setting of ``configs/baselines.yaml``), FedSGD
batches of one (victims 0 and 7), labels known, ``--iterations`` signed-Adam steps; each seed draws
CENSOR's candidates and the attack's start. Reported: the mean SSIM over seeds (victims averaged within
a seed) with a 95 % t-interval, and the paired difference censor-aware − IG.

Training: ``--steps`` SGD steps (lr 0.5, batch 32) of an MLP 64-32-10 on 8×8 digits, on plain
gradients and on CENSOR's releases (``fallback`` best and original; the authors' ``projection``),
test accuracy over seeds.

    python benchmarks/censor.py --seeds 5 --iterations 500 --steps 300
"""

from __future__ import annotations

import argparse
import json

import torch
from torch import nn

from leakshield.data import load_dataset
from leakshield.defenses.censor import CensorParams, censor_gradient
from leakshield.experiment.probe import probe_attack
from leakshield.gradients import plain_gradient
from leakshield.leaderboard.intervals import estimate

TANH_LENET = {"activation": "tanh", "init_range": None}
SETTINGS = {
    "none": [("none", {})],
    "censor": [("censor", {})],
    "censor (fallback: original)": [("censor", {"fallback": "original"})],
}
VARIANTS = {
    "plain SGD": None,
    "censor": {},
    "censor (fallback: original)": {"fallback": "original"},
    "censor (authors' projection)": {"projection": "reference"},
}


def _text(values: list[float]) -> str:
    e = estimate(values)
    return f"{e.mean:.3f} ± {e.half_width:.3f} (n={e.n})" if e.half_width is not None else f"{e.mean:.3f}"


def leakage(seeds: int, iterations: int) -> dict:
    digits = load_dataset("digits", {"channels": 3, "size": 32})
    out: dict = {}
    for setting, entries in SETTINGS.items():
        for attack in ("ig", "censor-aware"):
            scores = [
                probe_attack(digits, entries, attack, {"iterations": iterations}, model_params=TANH_LENET,
                             seed=seed).ssim
                for seed in range(seeds)
            ]  # fmt: skip
            out[f"{setting} · {attack}"] = scores
            print(f"{setting:30s} {attack:14s} SSIM {_text(scores)}", flush=True)
        gain = [a - b for a, b in zip(out[f"{setting} · censor-aware"], out[f"{setting} · ig"], strict=True)]
        print(f"{setting:30s} censor-aware − IG: {_text(gain)}", flush=True)
    return out


def accuracy_after(steps: int, seed: int, variant: dict | None) -> float:
    data = load_dataset("digits", {"size": 8})
    norm = data.info.normalize
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 10))
    draw = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        rows = torch.randint(len(data.train), (32,), generator=draw)
        x, y = norm(data.train.x[rows]), data.train.y[rows]
        g = plain_gradient(model, x, y)
        if variant is not None:
            g, _ = censor_gradient(model, x, y, g, CensorParams(**variant), draw)
        with torch.no_grad():
            for name, p in model.named_parameters():
                p -= 0.5 * g[name]
    with torch.no_grad():
        return float((model(norm(data.test.x)).argmax(1) == data.test.y).float().mean())


def training(seeds: int, steps: int) -> dict:
    out = {}
    for name, variant in VARIANTS.items():
        out[name] = [accuracy_after(steps, seed, variant) for seed in range(seeds)]
        print(f"{name:30s} test accuracy after {steps} steps {_text(out[name])}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--json", help="write the raw numbers here")
    args = parser.parse_args()
    result = {"training": training(args.seeds, args.steps), "leakage": leakage(args.seeds, args.iterations)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
