"""CENSOR (Zhang et al., NDSS 2025) measured: what IG and the adaptive ``censor-aware`` attack recover,
and whether a model trains on CENSOR's releases.

Leakage: digits at 32×32×3, untrained tanh LeNet (the setting of ``configs/baselines.yaml``), FedSGD
batches of one (victims 0 and 7), labels known, ``--iterations`` signed-Adam steps; each seed draws
CENSOR's candidates and the attack's start. Reported: the mean SSIM over seeds (victims averaged within
a seed) with a 95 % t-interval, and the paired difference censor-aware − IG.

Training: ``--steps`` SGD steps (lr 0.5, batch 32) of an MLP 64-32-10 on 8×8 digits, on plain
gradients and on CENSOR's releases (``fallback`` best and original; the authors' ``projection``),
test accuracy over seeds, and the share of steps whose fallback fired (no candidate lowered the loss).

Late leakage: the same attacks on the LeNet after ``--trained-steps`` plain SGD steps, where the
fallback fires most.

    python benchmarks/censor.py --seeds 5 --iterations 500 --steps 300 --trained-steps 300
"""

from __future__ import annotations

import argparse
import json

import torch
from torch import nn

from leakshield.data import load_dataset
from leakshield.defenses.base import DefensePipeline
from leakshield.defenses.censor import CensorParams, censor_gradient
from leakshield.experiment.config import Component
from leakshield.experiment.federation import build_model
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
        for attack in ("ig",) if setting == "none" else ("ig", "censor-aware"):
            scores = [
                probe_attack(digits, entries, attack, {"iterations": iterations}, model_params=TANH_LENET,
                             seed=seed).ssim
                for seed in range(seeds)
            ]  # fmt: skip
            out[f"{setting} · {attack}"] = scores
            print(f"{setting:30s} {attack:14s} SSIM {_text(scores)}", flush=True)
        if setting != "none":
            gain = [
                a - b for a, b in zip(out[f"{setting} · censor-aware"], out[f"{setting} · ig"], strict=True)
            ]
            print(f"{setting:30s} censor-aware − IG: {_text(gain)}", flush=True)
    return out


def trained_lenet(steps: int) -> dict[str, torch.Tensor]:
    """The probe's tanh LeNet after ``steps`` plain SGD steps (lr 0.1, batch 32) on digits at 32×32×3:
    a model late in training, where CENSOR's fallback fires most."""
    digits = load_dataset("digits", {"channels": 3, "size": 32})
    net = build_model(Component(name="lenet", **TANH_LENET), DefensePipeline(), digits.info, 0, "cpu").eval()
    draw = torch.Generator().manual_seed(0)
    for _ in range(steps):
        rows = torch.randint(len(digits.train), (32,), generator=draw)
        g = plain_gradient(net, digits.info.normalize(digits.train.x[rows]), digits.train.y[rows])
        with torch.no_grad():
            for name, p in net.named_parameters():
                p -= 0.1 * g[name]
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def leakage_late(seeds: int, iterations: int, steps: int) -> dict:
    """The same attacks on the LeNet after ``steps`` plain steps (CENSOR's authors train on clean
    gradients after their first 10 epochs; a client that joins late sees such a model)."""
    digits = load_dataset("digits", {"channels": 3, "size": 32})
    state = trained_lenet(steps)
    out: dict = {}
    for setting in ("censor", "censor (fallback: original)"):
        for attack in ("ig", "censor-aware"):
            scores = [
                probe_attack(digits, SETTINGS[setting], attack, {"iterations": iterations},
                             model_params=TANH_LENET, seed=seed, state=state).ssim
                for seed in range(seeds)
            ]  # fmt: skip
            out[f"{setting} · {attack}"] = scores
            print(f"after {steps} steps: {setting:30s} {attack:14s} SSIM {_text(scores)}", flush=True)
    return out


def accuracy_after(steps: int, seed: int, variant: dict | None) -> tuple[float, float]:
    """Test accuracy after ``steps`` steps, and the share of steps whose fallback fired."""
    data = load_dataset("digits", {"size": 8})
    norm = data.info.normalize
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 10))
    draw = torch.Generator().manual_seed(seed)
    fired = 0
    for _ in range(steps):
        rows = torch.randint(len(data.train), (32,), generator=draw)
        x, y = norm(data.train.x[rows]), data.train.y[rows]
        g = plain_gradient(model, x, y)
        if variant is not None:
            g, fell_back = censor_gradient(model, x, y, g, CensorParams(**variant), draw)
            fired += fell_back
        with torch.no_grad():
            for name, p in model.named_parameters():
                p -= 0.5 * g[name]
    with torch.no_grad():
        return float((model(norm(data.test.x)).argmax(1) == data.test.y).float().mean()), fired / steps


def training(seeds: int, steps: int) -> dict:
    out = {}
    for name, variant in VARIANTS.items():
        runs = [accuracy_after(steps, seed, variant) for seed in range(seeds)]
        out[name] = {"accuracy": [a for a, _ in runs], "fallback_share": [f for _, f in runs]}
        print(f"{name:30s} test accuracy after {steps} steps {_text(out[name]['accuracy'])}; "
              f"fallback fired in {_text(out[name]['fallback_share'])} of the steps", flush=True)  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--trained-steps", type=int, default=300, help="plain steps before the late attack")
    parser.add_argument("--only", choices=("training", "leakage", "late"), help="run one measurement")
    parser.add_argument("--json", help="write the raw numbers here")
    args = parser.parse_args()
    result = {}
    if args.only in (None, "training"):
        result["training"] = training(args.seeds, args.steps)
    if args.only in (None, "leakage"):
        result["leakage"] = leakage(args.seeds, args.iterations)
    if args.only in (None, "late"):
        result["late"] = leakage_late(args.seeds, args.iterations, args.trained_steps)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
