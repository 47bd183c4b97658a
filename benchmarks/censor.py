"""CENSOR (Zhang et al., NDSS 2025) measured: what IG and the adaptive ``censor-aware`` attack recover,
and whether a model trains on CENSOR's releases.

Leakage: digits at 32×32×3, untrained tanh LeNet (the setting of ``configs/baselines.yaml``), FedSGD
batches of one (victims 0 and 7), labels known, ``--iterations`` signed-Adam steps; each seed draws
CENSOR's candidates and the attack's start. Reported: the mean SSIM over seeds (victims averaged within
a seed) with a 95 % t-interval, and the paired difference censor-aware − IG.

Training: ``--steps`` SGD steps (lr 0.5, batch 32) of an MLP 64-32-10 on 8×8 digits under each
variant of CENSOR (``fallback`` best and original, float32 scoring, the authors' ``projection``, and all
three as the authors' code has them) and each protocol: ``every-step`` trains on the releases, the
authors' protocol on clean gradients with the release computed for each step's batch as if attacked.
Reported over seeds: test accuracy, the share of steps whose fallback fired (no candidate lowered the
loss) and the mean cosine between the release and the true gradient.

Protocols: the ``protocol`` option end to end, a FedAvg federation (4 IID clients, ``--rounds`` rounds,
the same MLP, lr 0.5, batch 32, T 20) without a defense and under ``censor`` with each protocol.

Late leakage: the same attacks on the LeNet after ``--trained-steps`` plain SGD steps, where the
fallback fires most.

    python benchmarks/censor.py --seeds 5 --iterations 500 --steps 300 --trained-steps 300 --rounds 10
"""

from __future__ import annotations

import argparse
import json

import torch
from torch import nn

from leakshield.data import IIDPartition, load_dataset, partition_indices
from leakshield.defenses import create_defense
from leakshield.defenses.base import DefensePipeline
from leakshield.defenses.censor import CensorParams, censor_gradient
from leakshield.experiment.config import Component
from leakshield.experiment.federation import build_model
from leakshield.experiment.probe import probe_attack
from leakshield.fl import FederatedSimulation, FLConfig, LocalTraining
from leakshield.gradients import plain_gradient
from leakshield.leaderboard.intervals import estimate
from leakshield.metrics import accuracy

TANH_LENET = {"activation": "tanh", "init_range": None}
SETTINGS = {
    "none": [("none", {})],
    "censor": [("censor", {})],
    "censor (fallback: original)": [("censor", {"fallback": "original"})],
}
#: the authors' code: the true gradient when no candidate lowers the loss, their projection, float32 scoring
AUTHORS_CODE = {"fallback": "original", "projection": "reference", "float64_selection": False}
VARIANTS = {
    "plain SGD": None,
    "censor": {},
    "censor (fallback: original)": {"fallback": "original"},
    "censor (fallback: original, float32 scoring)": {"fallback": "original", "float64_selection": False},
    "censor (authors' projection)": {"projection": "reference"},
    "censor (the authors' code)": AUTHORS_CODE,
}
#: the variants also measured under the authors' protocol (clean training): the ones with their fallback
AUTHORS_PROTOCOL = ("censor (fallback: original)", "censor (fallback: original, float32 scoring)",
                    "censor (the authors' code)")  # fmt: skip


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


def _cosine(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """The cosine between two gradients, all tensors concatenated (in float64)."""
    u = torch.cat([a[k].double().flatten() for k in b])
    v = torch.cat([b[k].double().flatten() for k in b])
    return float(u @ v / (u.norm() * v.norm()).clamp_min(1e-300))


def accuracy_after(steps: int, seed: int, variant: dict | None, protocol: str = "every-step") -> tuple:
    """(test accuracy after ``steps`` steps, the share of steps whose fallback fired, the mean cosine of
    the release with the true gradient). ``every-step`` trains on the releases; ``authors`` trains on
    the true gradients and computes the release of each step's batch as the attacked one. Batches and
    candidates draw from separate streams: the authors' protocol trains exactly as plain SGD."""
    data = load_dataset("digits", {"size": 8})
    norm = data.info.normalize
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 10))
    batches = torch.Generator().manual_seed(seed)
    candidates = torch.Generator().manual_seed(10_000 + seed)
    fired, cosines = 0, []
    for _ in range(steps):
        rows = torch.randint(len(data.train), (32,), generator=batches)
        x, y = norm(data.train.x[rows]), data.train.y[rows]
        g = plain_gradient(model, x, y)
        if variant is not None:
            released, fell_back = censor_gradient(model, x, y, g, CensorParams(**variant), candidates)
            fired += fell_back
            cosines.append(_cosine(released, g))
            g = released if protocol == "every-step" else g
        with torch.no_grad():
            for name, p in model.named_parameters():
                p -= 0.5 * g[name]
    with torch.no_grad():
        correct = float((model(norm(data.test.x)).argmax(1) == data.test.y).float().mean())
    return correct, fired / steps, sum(cosines) / len(cosines) if cosines else 1.0


def training(seeds: int, steps: int) -> dict:
    out = {}
    runs = [(name, "every-step") for name in VARIANTS] + [(name, "authors") for name in AUTHORS_PROTOCOL]
    for name, protocol in runs:
        measured = [accuracy_after(steps, seed, VARIANTS[name], protocol) for seed in range(seeds)]
        key = name if protocol == "every-step" else f"{name} · authors' protocol"
        out[key] = {
            k: [m[i] for m in measured] for i, k in enumerate(("accuracy", "fallback_share", "cosine"))
        }
        print(f"{key:55s} test accuracy after {steps} steps {_text(out[key]['accuracy'])}; fallback "
              f"fired in {_text(out[key]['fallback_share'])} of the steps; cosine with the true gradient "
              f"{_text(out[key]['cosine'])}", flush=True)  # fmt: skip
    return out


def federation_accuracy(rounds: int, seed: int, protocol: str | None) -> float:
    """Test accuracy of a FedAvg federation (module docstring) after ``rounds`` rounds, without a
    defense (``protocol`` None) or under ``censor`` with that ``protocol``."""
    data = load_dataset("digits", {"size": 8})
    config = FLConfig(clients=4, local=LocalTraining(algorithm="fedavg", local_lr=0.5, batch_size=32))
    clients = [data.train.subset(p) for p in partition_indices(data.train.y, 4, IIDPartition(), seed=0)]
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 10))
    pipeline = DefensePipeline([create_defense("censor", {"protocol": protocol})] if protocol else [])
    FederatedSimulation.honest(model, clients, config, pipeline, data.info, seed=seed).run(rounds)
    return accuracy(model, data.test, normalize=data.info.normalize)


def protocols(seeds: int, rounds: int) -> dict:
    out = {}
    for protocol in (None, "authors", "every-step"):
        key = f"censor, protocol: {protocol}" if protocol else "no defense"
        out[key] = [federation_accuracy(rounds, seed, protocol) for seed in range(seeds)]
        print(f"FedAvg, {rounds} rounds: {key:30s} test accuracy {_text(out[key])}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--trained-steps", type=int, default=300, help="plain steps before the late attack")
    parser.add_argument("--rounds", type=int, default=10, help="FedAvg rounds of the protocols' federation")
    parser.add_argument(
        "--only", choices=("training", "protocols", "leakage", "late"), help="run one measurement"
    )
    parser.add_argument("--json", help="write the raw numbers here")
    args = parser.parse_args()
    result = {}
    if args.only in (None, "training"):
        result["training"] = training(args.seeds, args.steps)
    if args.only in (None, "protocols"):
        result["protocols"] = protocols(args.seeds, args.rounds)
    if args.only in (None, "leakage"):
        result["leakage"] = leakage(args.seeds, args.iterations)
    if args.only in (None, "late"):
        result["late"] = leakage_late(args.seeds, args.iterations, args.trained_steps)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
