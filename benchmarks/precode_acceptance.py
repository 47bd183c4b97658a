"""PRECODE's acceptance measurements (issue: seed defenses I), printed, never asserted.

1. IG (batch 1, labels known, untrained DMLP) on 8 digits victims and on the first 8 CIFAR-10 victims of
   ``../shared/data/cifar10_victims128.npz``, without and with PRECODE: SSIM, PSNR, ASR (SSIM ≥ 0.6).
2. The analytic adaptive attack on the PRECODE DMLP (a fully connected layer precedes the bottleneck).
3. FedAvg utility on digits: plain DMLP vs PRECODE DMLP (10 IID clients, same schedule and seed).

    python benchmarks/precode_acceptance.py [--iterations 1000] [--rounds 20] [--seeds 0 1 2]
                                            [--skip-attacks | --skip-utility]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from leakshield.attacks import create_attack
from leakshield.data import DatasetInfo, ImageSet, load_dataset, partition_indices
from leakshield.data.partition import IIDPartition
from leakshield.defenses import DefensePipeline, create_defense
from leakshield.fl import FederatedSimulation, FLConfig, LocalTraining, server_view_of
from leakshield.metrics import match_reconstructions, psnr, ssim
from leakshield.metrics.utility import accuracy
from leakshield.models import create_model

SHARED = Path(
    os.environ.get("LEAKSHIELD_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")
)
CIFAR = DatasetInfo("cifar10", (3, 32, 32), 10, (0.4915, 0.4823, 0.4468), (0.2470, 0.2435, 0.2616))


def victims_digits(data) -> list[ImageSet]:
    order = torch.randperm(len(data.train), generator=torch.Generator().manual_seed(0))[:8]
    return [data.train.subset([int(i)]) for i in order]


def victims_cifar() -> list[ImageSet]:
    with np.load(SHARED / "cifar10_victims128.npz", allow_pickle=False) as npz:
        x = torch.from_numpy(npz["images"][:8]).permute(0, 3, 1, 2).float() / 255
        y = torch.from_numpy(npz["labels"][:8]).long()
    return [ImageSet(x[i : i + 1], y[i : i + 1]) for i in range(8)]


def attack(name, params, batches, info, defended: bool, seed: int) -> tuple[list[float], list[float]]:
    model = create_model("dmlp", in_shape=info.shape, num_classes=10, seed=seed)
    pipe = DefensePipeline([create_defense("precode")] if defended else [])
    model = pipe.model_hook(model, seed=seed).eval()
    views = [
        server_view_of(model, b, info, defenses=pipe, labels_known=True, seed=seed * 100 + i)
        for i, b in enumerate(batches)
    ]
    recs = create_attack(name, params).reconstruct_many(views, seeds=[seed * 100 + i for i in range(8)])
    ps, ss = [], []
    for rec, batch in zip(recs, batches, strict=True):
        matched = rec.images[match_reconstructions(rec.images, batch.x)]
        ps.append(float(psnr(matched, batch.x).mean()))
        ss.append(float(ssim(matched, batch.x).mean()))
    return ps, ss


def report(label: str, ps: list[float], ss: list[float], seconds: float) -> None:
    asr = sum(s >= 0.6 for s in ss) / len(ss)
    print(
        f"  {label:<34} SSIM {statistics.fmean(ss):.3f}  PSNR {statistics.fmean(ps):6.2f} dB  "
        f"ASR {asr:.2f}  ({seconds:.0f} s; per victim SSIM {', '.join(f'{s:.2f}' for s in ss)})",
        flush=True,
    )


def utility(data, defended: bool, rounds: int, seed: int) -> float:
    info = data.info
    model = create_model("dmlp", in_shape=info.shape, num_classes=10, seed=seed)
    pipe = DefensePipeline([create_defense("precode")] if defended else [])
    model = pipe.model_hook(model, seed=seed)
    config = FLConfig(
        clients=10,
        partition=IIDPartition(),
        local=LocalTraining(algorithm="fedavg", local_lr=0.05, momentum=0.9, batch_size=16),
    )
    parts = partition_indices(data.train.y, 10, config.partition, 0)
    clients = [data.train.subset(p) for p in parts]
    FederatedSimulation.honest(model, clients, config, pipe, info, seed=seed).run(rounds)
    return accuracy(model, data.test, normalize=info.normalize)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--skip-utility", action="store_true")
    parser.add_argument("--skip-attacks", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(2)
    data = load_dataset("digits", {"channels": 3, "size": 32})
    sets = {"digits": (victims_digits(data), data.info), "cifar10 (first 8)": (victims_cifar(), CIFAR)}
    ig = {"iterations": args.iterations}
    for seed in args.seeds:
        print(f"seed {seed}: IG ({args.iterations} steps), batch 1, labels known, untrained DMLP", flush=True)
        for name, (batches, info) in sets.items() if not args.skip_attacks else ():
            for defended in (False, True):
                start = time.perf_counter()
                ps, ss = attack("ig", ig, batches, info, defended, seed)
                report(
                    f"{name} · {'PRECODE' if defended else 'plain'} · ig", ps, ss, time.perf_counter() - start
                )
            start = time.perf_counter()
            ps, ss = attack("precode-analytic", {}, batches, info, True, seed)
            report(f"{name} · PRECODE · precode-analytic", ps, ss, time.perf_counter() - start)
        if not args.skip_utility:
            start = time.perf_counter()
            plain = utility(data, False, args.rounds, seed)
            pre = utility(data, True, args.rounds, seed)
            print(
                f"  FedAvg {args.rounds} rounds, digits test accuracy: plain DMLP {plain:.3f}, PRECODE DMLP "
                f"{pre:.3f}, difference {100 * (plain - pre):+.1f} points "
                f"({time.perf_counter() - start:.0f} s)",
                flush=True,
            )


if __name__ == "__main__":
    main()
