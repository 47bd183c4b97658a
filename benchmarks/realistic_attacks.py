"""The attacks built for realistic FL beside Inverting Gradients, on the same victims at the same budget:
FedLeak (partial gradient matching + gradient regularization) and the FedAvg attack of Dimitrov et al.
(epoch copies + epoch-order-invariant prior) against ``ig`` at FedSGD batches of 16 and 64, at four
local FedAvg epochs over one minibatch of 16 (the leaderboard's ``local-steps`` scenario), and at two
shuffled epochs over four minibatches of 4 (the client's order secret: the case the FedAvg attack is
built for). Leaderboard protocol: the embedded digits at 16 px, LeNet (tanh, PyTorch's init), untrained,
labels known, every attack at ``--iterations`` steps.

Each seed draws another victim batch and model initialization; an attack's score on a batch is the mean
SSIM of its images after matching. Reported: the seed mean with a 95 % Student-t interval, and each
attack's paired difference from IG on the same batches with its interval (a difference whose interval
excludes 0 is a measured win or loss; otherwise inconclusive at these seeds).

    python benchmarks/realistic_attacks.py --seeds 8 --out runs/realistic_attacks.json
    python benchmarks/realistic_attacks.py --seeds 3 --settings fedsgd-b16 --generator-width 64 \
        --attacks ig fedleak-pixels fedleak-released fedleak-released-no-filter  # 12 min on a busy CPU
    python benchmarks/realistic_attacks.py --victims DIR/cifar10_victims128.npz --seeds 4 \
        --settings fedsgd-b16 fedsgd-b64 --attacks ig fedleak --out runs/realistic_attacks_cifar.json

FedLeak comes twice: ``fedleak-pixels`` (alias ``fedleak``), leakshield's pixel port, and
``fedleak-released``, FedLeak as released (a generator searched with a double AdamW step, a 5×5 median
filter on its output). The release's generator is 256 channels wide, at 128 px, for 10,000 steps: a GPU's
job. On one CPU thread it costs about 5 s a step at batch 16 and 16 px, so a CPU row narrows it with
``--generator-width`` (and states the width; the JSON records it) and keeps the settings' budget.

With ``--victims`` (an .npz of ``images``, N×32×32×3 uint8, and ``labels``) the batches are drawn from
those CIFAR-10 photographs instead, LeNet at 32 px.

Run it alone (2 cores: one thread each).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from leakshield.attacks import create_attack
from leakshield.attacks.passive.fedavg_leakage import copies_of
from leakshield.attacks.passive.fedleak import PIXEL_PORT
from leakshield.data import ImageSet, load_dataset
from leakshield.data.types import DatasetInfo
from leakshield.fl import server_view_of
from leakshield.fl.config import LocalTraining
from leakshield.leaderboard.intervals import estimate
from leakshield.metrics import match_reconstructions, ssim
from leakshield.models import create_model

CIFAR = DatasetInfo("cifar10", (3, 32, 32), 10, (0.4915, 0.4823, 0.4468), (0.2470, 0.2435, 0.2616))
#: setting → (images in the batch, local training; None: FedSGD)
SETTINGS = {
    "fedsgd-b16": (16, None),
    "fedsgd-b64": (64, None),
    "fedavg-4x1-b16": (16, {"local_epochs": 4, "batch_size": 16, "shuffle": False}),
    "fedavg-2x4-b4-shuffled": (16, {"local_epochs": 2, "batch_size": 4, "shuffle": True}),
}
ATTACKS = {
    "ig": ("ig", {}),
    # FedLeak on pixels (leakshield's pixel port: Adam lr 0.1, signed look-ahead, no filter); "fedleak" is
    # the name the pixel port's published rows were measured under
    "fedleak": ("fedleak", PIXEL_PORT),
    "fedleak-pixels": ("fedleak", PIXEL_PORT),
    # FedLeak as released: the generator, the double AdamW step, the 5×5 median filter (--generator-width)
    "fedleak-released": ("fedleak", {}),
    "fedleak-released-no-filter": ("fedleak", {"median_filter": 0}),
    "fedavg-leakage": ("fedavg-leakage", {}),
    "fedavg-leakage-no-prior": ("fedavg-leakage", {"epoch_prior": 0.0}),
    # ablations (not run by default): the pixel port without its parts, the epoch prior's weight
    "fedleak-keep-all": ("fedleak", {**PIXEL_PORT, "keep_fraction": 1.0}),
    "fedleak-no-lookahead": ("fedleak", {**PIXEL_PORT, "regularization": 0.0}),
    "fedleak-neither": ("fedleak", {**PIXEL_PORT, "keep_fraction": 1.0, "regularization": 0.0}),
    "fedavg-leakage-prior-1": ("fedavg-leakage", {"epoch_prior": 1.0}),
    "fedavg-leakage-prior-100": ("fedavg-leakage", {"epoch_prior": 100.0}),
}
DEFAULT_ATTACKS = ["ig", "fedleak", "fedavg-leakage", "fedavg-leakage-no-prior"]


def interval(values: list[float]) -> dict:
    """The seed mean and its 95 % Student-t half-width (the leaderboard's estimate), rounded for the JSON."""
    found = estimate(values)
    half = None if found.half_width is None else round(found.half_width, 4)
    return {"mean": round(found.mean, 4), "half_width": half, "n": found.n}


def mean_ssim(images: torch.Tensor, truth: torch.Tensor) -> float:
    order = match_reconstructions(images, truth)
    return float(ssim(images[order], truth).mean())  # per-image SSIM, averaged


def victims(path: Path | None) -> tuple[DatasetInfo, ImageSet]:
    """The pool victim batches are drawn from: the digits at 16 px, or the photographs in ``path``."""
    if path is None:
        digits = load_dataset("digits", {"channels": 1, "size": 16})
        return digits.info, digits.train
    with np.load(path, allow_pickle=False) as npz:
        images = torch.from_numpy(npz["images"]).permute(0, 3, 1, 2).float() / 255.0
        return CIFAR, ImageSet(images.contiguous(), torch.from_numpy(npz["labels"]).long())


def run(
    seeds: int,
    iterations: int,
    settings: list[str],
    attacks: list[str],
    path: Path | None = None,
    generator_width: int = 256,
) -> dict:
    info, pool = victims(path)
    out: dict = {
        "seeds": seeds,
        "iterations": iterations,
        "victims": path.name if path else "digits-16px",
        "generator_width": generator_width,
        "settings": {},
    }
    for setting in settings:
        size, local = SETTINGS[setting]
        scores: dict[str, list[float]] = {a: [] for a in attacks}
        seconds: dict[str, list[float]] = {a: [] for a in attacks}
        for seed in range(seeds):
            rows = torch.randperm(len(pool), generator=torch.Generator().manual_seed(1000 + seed))[:size]
            batch = pool.subset(rows.tolist())
            model = create_model("lenet", {"activation": "tanh", "init_range": None}, in_shape=info.shape,
                                 num_classes=10, seed=seed)  # fmt: skip
            training = LocalTraining(algorithm="fedavg", local_lr=0.1, **local) if local else None
            view = server_view_of(model, batch, info, local=training, labels_known=True, seed=seed)
            for label in attacks:
                name, params = ATTACKS[label]
                if "prior" in label and copies_of(view) == 1:
                    continue  # one copy of the batch: the prior has nothing to tie
                start = time.perf_counter()
                if label.startswith("fedleak-released"):
                    params = {**params, "generator_width": generator_width}
                rec = create_attack(name, {"iterations": iterations, **params}).reconstruct(view, seed=seed)
                seconds[label].append(time.perf_counter() - start)
                scores[label].append(mean_ssim(rec.images, batch.x))
            print(setting, seed, {a: round(v[-1], 3) for a, v in scores.items() if v}, flush=True)
        row: dict = {}
        for label in attacks:
            if not scores[label]:
                continue
            row[label] = {
                "ssim": interval(scores[label]),
                "seconds_mean": round(statistics.fmean(seconds[label]), 2),
                "per_seed": [round(v, 4) for v in scores[label]],
            }
            if label != "ig" and scores.get("ig"):
                row[label]["minus_ig"] = interval(
                    [a - b for a, b in zip(scores[label], scores["ig"], strict=True)]
                )
        out["settings"][setting] = row
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument(
        "--iterations", type=int, default=200, help="every attack's steps (the standard preset's IG)"
    )
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--attacks", nargs="+", default=DEFAULT_ATTACKS, choices=list(ATTACKS))
    parser.add_argument(
        "--victims", type=Path, default=None, help="CIFAR-10 photographs (.npz) instead of digits"
    )
    parser.add_argument(
        "--generator-width",
        type=int,
        default=256,
        help="FedLeak as released: its generator's channels (the release's 256: seconds a step on one CPU "
        "thread at batch 16; a CPU run states the width it used)",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/realistic_attacks.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    result = run(args.seeds, args.iterations, args.settings, args.attacks, args.victims, args.generator_width)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    for setting, row in result["settings"].items():
        print(f"\n{setting}")
        for label, r in row.items():
            s, d = r["ssim"], r.get("minus_ig")
            diff = f"  − IG {d['mean']:+.3f} ± {d['half_width'] or 0:.3f}" if d else ""
            line = (
                f"  {label:26s} SSIM {s['mean']:.3f} ± {s['half_width'] or 0:.3f}  {r['seconds_mean']:6.1f} s"
            )
            print(line + diff)


if __name__ == "__main__":
    main()
