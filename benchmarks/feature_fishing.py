"""Feature fishing against class fishing on securely aggregated FedSGD updates, side by side in one run.

For each aggregate size (``--clients`` × 16 digits, 16×16 grey, a 1-hidden-layer MLP of width 1024) and
``--trials`` random aggregates of the training split: the share of aggregates of which the attack
recovers one sample exactly (PSNR ≥ 40 dB to its closest sample), the share at SSIM ≥ 0.6 to its
closest sample (the grid's criterion, which a blend of same-class digits also passes), the server's own
estimate of the chance that one sample speaks alone (feature fishing), and the cost: the server's work
per aggregate (a model prepared for every client) and the reconstruction.

    python benchmarks/feature_fishing.py --clients 1 10 50 --trials 40
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from leakshield.attacks import create_attack
from leakshield.data import load_dataset
from leakshield.defenses import DefensePipeline
from leakshield.fl import HonestClient, LocalTraining, ServerKnowledge, ThreatModel
from leakshield.fl.secure_aggregation import AggregateMember, observe_aggregate
from leakshield.metrics.image import psnr, ssim
from leakshield.models import create_model

BATCH = 16


def aggregate(digits, clients: int, trial: int) -> list[AggregateMember]:
    """``clients`` clients of 16 training digits each, drawn at random (seeded by ``trial``)."""
    order = torch.randperm(len(digits.train), generator=torch.Generator().manual_seed(trial))
    out = []
    for c in range(clients):
        data = digits.train.subset(order[c * BATCH : (c + 1) * BATCH].tolist())
        client = HonestClient(c, data, LocalTraining(), DefensePipeline(), digits.info)
        out.append(AggregateMember(client, data))
    return out


def attack_once(digits, model, name: str, params: dict, parts) -> dict[str, float]:
    attack = create_attack(name, params)
    knowledge = ServerKnowledge(digits.info, digits.public)
    gens = [[torch.Generator().manual_seed(i) for i in range(len(parts))]]
    start = time.perf_counter()
    obs = observe_aggregate([model], parts, 0, threat=ThreatModel(), rounds=[0], server=attack,
                            knowledge=knowledge, generators=gens)  # fmt: skip
    observed = time.perf_counter() - start
    start = time.perf_counter()
    found = attack.reconstruct(obs.views[0], seed=0).images[:1]
    rebuilt = time.perf_counter() - start
    truth = torch.cat([p.batch.x for p in parts])
    row = {
        "psnr": max(float(psnr(found, t[None])) for t in truth),
        "ssim": max(float(ssim(found, t[None])) for t in truth),
        "observe_s": observed,
        "reconstruct_s": rebuilt,
    }
    fished = getattr(obs.views[0].secrets, "fished", None)
    if fished is not None:
        row["chance"] = fished.chance
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 10, 50])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--class-trials", type=int, default=8, help="aggregates for class fishing (slow)")
    parser.add_argument("--target", type=int, default=0)
    parser.add_argument("--fishing-iterations", type=int, default=500)
    args = parser.parse_args()
    torch.set_num_threads(1)
    digits = load_dataset("digits", {"channels": 1, "size": 16})
    model = create_model("mlp", {"width": 1024, "hidden_layers": 1}, in_shape=digits.info.shape,
                         num_classes=10, seed=0)  # fmt: skip
    print("| attack | samples per aggregate | aggregates | one sample exact (PSNR ≥ 40) | SSIM ≥ 0.6 "
          "| server's estimate | server s / aggregate | reconstruction s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for clients in args.clients:
        size = clients * BATCH
        runs = [
            ("feature-fishing", {"aggregate_size": size, "target_class": args.target}, args.trials),
            ("fishing", {"target_class": args.target, "iterations": args.fishing_iterations},
             args.class_trials),
        ]  # fmt: skip
        for name, params, trials in runs:
            parts = [aggregate(digits, clients, t) for t in range(trials)]
            rows = [attack_once(digits, model, name, params, p) for p in parts]
            exact = sum(r["psnr"] >= 40 for r in rows) / trials
            alike = sum(r["ssim"] >= 0.6 for r in rows) / trials
            chance = f"{statistics.mean(r['chance'] for r in rows):.2f}" if "chance" in rows[0] else "—"
            print(f"| {name} | {size} | {trials} | {exact:.2f} | {alike:.2f} | {chance} "
                  f"| {statistics.mean(r['observe_s'] for r in rows):.2f} "
                  f"| {statistics.mean(r['reconstruct_s'] for r in rows):.2f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
