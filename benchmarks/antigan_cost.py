"""Anti-GAN's cost on this machine (never asserted), in one run: the defender's two-step fit (stage 1:
the CGAN on C(x); stage 2: fine-tuning with λ·L_obf; then the mixed dataset) on the digits defender of
configs/antigan.yaml (classes 0–4), and one run of the GAN attack of Hitaj et al. (the attacker's
rounds, its final generator steps and the class-level SSIM of its samples), each timed. Nothing is cached:
every number is a fresh computation.

    python benchmarks/antigan_cost.py [--cgan-steps 1500] [--finetune-steps 500] [--rounds 30]
        [--generator-steps 30] [--final-steps 300] [--samples 1000] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import time

import torch

from leakshield.artifacts import FitData
from leakshield.attacks import create_attack
from leakshield.data import load_dataset
from leakshield.defenses import DefensePipeline, create_defense
from leakshield.fl import FederatedSimulation, FLConfig, HonestClient
from leakshield.metrics.class_ssim import class_level_ssim
from leakshield.models import create_model


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cgan-steps", type=int, default=1500)
    parser.add_argument("--finetune-steps", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--generator-steps", type=int, default=30)
    parser.add_argument("--final-steps", type=int, default=300)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    data = load_dataset("digits", {"size": 32})
    info = data.info
    defender = data.train.subset((data.train.y < 5).nonzero().flatten().tolist()).to(device)
    attacker_data = data.train.subset((data.train.y >= 5).nonzero().flatten().tolist()).to(device)
    name = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"CPU, {torch.get_num_threads()} threads"
    )
    print(f"device: {name}; defender {len(defender)} images, attacker {len(attacker_data)}")

    defense = create_defense(
        "antigan", {"cgan_steps": args.cgan_steps, "finetune_steps": args.finetune_steps}
    )
    begin = time.perf_counter()
    artifact = defense.fit(FitData(info, defender, None, 0, device, False, None, data.public.to(device)))
    fit_seconds = time.perf_counter() - begin
    steps = f"{args.cgan_steps} + {args.finetune_steps} steps of 64"
    print(f"Anti-GAN two-step fit: {steps} → {fit_seconds:.1f} s "
          f"({1000 * fit_seconds / (args.cgan_steps + args.finetune_steps):.0f} ms/step incl. extractor and "
          f"generation); final losses {artifact.metadata['losses']}")  # fmt: skip

    attack = create_attack("hitaj", {"rounds": args.rounds, "generator_steps": args.generator_steps,
                                     "final_steps": args.final_steps, "samples": args.samples})  # fmt: skip
    fl = FLConfig.model_validate({"clients": 2, "local": {"algorithm": "fedavg", "local_lr": 0.05,
                                                          "momentum": 0.9, "batch_size": 32}})  # fmt: skip
    model = create_model("antigan-cnn", in_shape=info.shape, num_classes=10).to(device)
    begin = time.perf_counter()
    attacker = attack.participant(1, attacker_data, fl.local, info, seed=0)
    victim = HonestClient(0, defender, fl.local, DefensePipeline(), info)
    sim = FederatedSimulation(model, [victim, attacker], fl, seed=0)
    sim.run(args.rounds)
    attacker.finish(sim.model)
    rounds_seconds = time.perf_counter() - begin
    begin = time.perf_counter()
    released = attacker.release(args.samples, seed=0)  # the attacker's output; the evaluator scores it
    targets = torch.isin(defender.y, released.y.unique())
    value, _ = class_level_ssim(released.x, released.y, defender.x[targets], defender.y[targets])
    score_seconds = time.perf_counter() - begin
    print(f"GAN attack: {args.rounds} rounds × {args.generator_steps} generator steps + {args.final_steps} "
          f"final → {rounds_seconds:.1f} s (FL training of both clients included); class-level SSIM of "
          f"{args.samples} samples against {len(defender)} private images: {score_seconds:.1f} s "
          f"(value {value:.3f})")  # fmt: skip


if __name__ == "__main__":
    main()
