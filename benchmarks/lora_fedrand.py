"""FedRand against plain federated LoRA on the same clients, victims and seeds: test accuracy after
FedAvg rounds, and what DAGER reads from a victim's FedSGD message at the trained state (batch 1).

    python benchmarks/lora_fedrand.py --corpus ../rotten_tomatoes.csv.bz2 [--seeds 0 1 2 3 4]

Per seed: BERT (width 64, 2 blocks) pretrained 2 epochs on the public split, rank-16 adapters on the
attention, 10 clients (by movie), ``--rounds`` FedAvg rounds of one epoch (Adam 10⁻³); then each of
``--victims`` victims (client i mod 10, one review) sends one gradient, plain or through FedRand. The
seed is the unit: victims and initial adapters are drawn from it; intervals are 95 % t over seeds, the
differences paired per seed (``leakshield.leaderboard.comparisons.difference``).
"""

from __future__ import annotations

import argparse
import time

import torch

from leakshield.artifacts import ArtifactCache
from leakshield.experiment.config import DefenseSetting
from leakshield.leaderboard.comparisons import difference
from leakshield.leaderboard.intervals import estimate
from leakshield.text.dager_lora import lora_dager_attack
from leakshield.text.fedrand import AdapterFederation
from leakshield.text.tokenizer import PAD
from leakshield.text_grid.config import parse_text_config
from leakshield.text_grid.world import TextWorld


def config(corpus: str, seed: int, victims: int, rank: int) -> dict:
    return {
        "track": "text",
        "corpus": {"path": corpus, "format": "rotten-tomatoes", "public_fraction": 0.2, "test_fraction": 0.2},
        "tokenizer": {"kind": "wordpiece", "vocab_size": 2000},
        "max_length": 32,
        "models": [
            {
                "name": "bert",
                "width": 64,
                "layers": 2,
                "heads": 2,
                "pretrain": {"epochs": 2},
                "lora": {"rank": rank},
            }
        ],
        "fl": {"clients": 10},
        "partition": "by-group",
        "victims": {"count": victims, "batches": [1], "seed": seed},
        "attacks": ["dager"],
    }


def exact(ids: torch.Tensor, truth: torch.Tensor) -> float:
    got = [int(t) for t in ids[0] if t != PAD]
    return float(got == [int(t) for t in truth[0] if t != PAD])


def run_seed(args: argparse.Namespace, seed: int, cache: ArtifactCache) -> dict[str, dict[str, float]]:
    cfg = parse_text_config(config(args.corpus, seed, args.victims, args.rank))
    world = TextWorld(cfg, torch.device("cpu"), cache=cache)
    out: dict[str, dict[str, float]] = {}
    for name, fedrand in (("plain LoRA", False), ("FedRand", True)):
        model = world.fresh_model(cfg.models[0], DefenseSetting(name="none"), seed)
        federation = AdapterFederation(model, world.clients, fedrand=fedrand, lr=1e-3, seed=seed)
        started = time.perf_counter()
        federation.run(args.rounds)
        seconds = time.perf_counter() - started
        hits, read = [], []
        for victim in world.victims[1]:
            message = federation.victim_gradient(victim.client, victim.batch.x, victim.batch.y)
            result = lora_dager_attack(model, message, 1)
            hits.append(exact(result.ids, victim.batch.x))
            read.append(float(bool(result.candidates)))
        out[name] = {
            "accuracy": world.accuracy(model),
            "exact": sum(hits) / len(hits),
            "read": sum(read) / len(read),
            "seconds per round": seconds / args.rounds,
        }
        print(f"seed {seed} {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in out[name].items()), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", required=True, help="the Rotten Tomatoes CSV (leakshield fetch-corpus)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--victims", type=int, default=10)
    parser.add_argument("--rank", type=int, default=16)
    args = parser.parse_args()
    started = time.perf_counter()
    cache = ArtifactCache()
    runs = [run_seed(args, seed, cache) for seed in args.seeds]
    print(f"\n{len(args.seeds)} seeds, {args.rounds} rounds, {args.victims} victims each, rank {args.rank}")
    print("| | test accuracy | DAGER exact (share of victims) | victims with tokens read | s / round |")
    print("|---|---|---|---|---|")
    for name in ("plain LoRA", "FedRand"):
        cells = [estimate([r[name][k] for r in runs]).text() for k in ("accuracy", "exact", "read")]
        per_round = sum(r[name]["seconds per round"] for r in runs) / len(runs)
        print(f"| {name} | " + " | ".join(cells) + f" | {per_round:.1f} |")
    for key in ("accuracy", "exact"):
        d = difference([r["FedRand"][key] for r in runs], [r["plain LoRA"][key] for r in runs], 1, 0.025)
        print(f"FedRand − plain LoRA, {key}: {d.text()}")
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
