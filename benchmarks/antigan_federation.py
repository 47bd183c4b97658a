"""How far the undefended Anti-GAN federation trains (never asserted): the test accuracy of
configs/antigan.yaml's federation (two clients split by class, 0–4 and 5–9; antigan-cnn; FedAvg with
Adam 1e-4, one local epoch of batches of 32, as the paper's Sec. 5.1) every ``--every`` rounds, per seed.

    python benchmarks/antigan_federation.py [--rounds 100] [--every 10] [--seeds 0 1 2] [--threads 1]
"""

from __future__ import annotations

import argparse
import time

import torch

from leakshield.data import load_dataset
from leakshield.defenses import DefensePipeline
from leakshield.fl import FederatedSimulation, FLConfig, HonestClient
from leakshield.metrics.utility import accuracy
from leakshield.models import create_model


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    data = load_dataset("digits", {"channels": 1, "size": 32})
    info = data.info
    halves = [
        data.train.subset(((data.train.y < 5) == low).nonzero().flatten().tolist()) for low in (True, False)
    ]
    local = {"algorithm": "fedavg", "optimizer": "adam", "local_lr": 1e-4, "momentum": 0.0, "batch_size": 32}
    fl = FLConfig.model_validate({"clients": 2, "local": local})
    for seed in args.seeds:
        model = create_model("antigan-cnn", in_shape=info.shape, num_classes=info.num_classes, seed=seed)
        clients = [HonestClient(i, half, fl.local, DefensePipeline(), info) for i, half in enumerate(halves)]
        sim = FederatedSimulation(model, clients, fl, seed=seed)
        start, curve = time.perf_counter(), []
        for done in range(args.every, args.rounds + 1, args.every):
            sim.run(args.every)
            curve.append((done, accuracy(sim.model, data.test, normalize=info.normalize)))
        best = max(curve, key=lambda point: point[1])
        points = ", ".join(f"{r}: {a:.3f}" for r, a in curve)
        print(
            f"seed {seed}: {points}; best {best[1]:.3f} at round {best[0]} "
            f"({time.perf_counter() - start:.0f} s)"
        )


if __name__ == "__main__":
    main()
