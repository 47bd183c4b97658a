"""Peak memory of the vectorized attack engine for many victims, and the chunk size it chose.

64 victims (batch 1, digits 32×32×3) of ResNet-20 and ConvNet-64 under ``ig`` with ``path:
vectorized`` and a few steps. The engine measures the memory of a 4-victim step, then attacks the
victims in chunks that fit in half the free memory (or one by one if not even one fits): the figures
are the peak resident size of this process during the attack (Linux VmHWM, reset before it; on CUDA
the allocator's peak), the chunk and the measured bytes per victim.

    python benchmarks/attack_memory.py [--victims 64] [--steps 3] [--device cpu]
"""

from __future__ import annotations

import argparse
import time

import torch

from leakshield.attacks import create_attack
from leakshield.attacks.passive.inversion.calibration import _free_memory, _peak, _reset_peak
from leakshield.data import load_dataset
from leakshield.fl import server_view_of
from leakshield.models import create_model

MODELS = (("resnet20", None), ("convnet", {"width": 64}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--victims", type=int, default=64)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    data = load_dataset("digits", {"channels": 3, "size": 32})
    free = _free_memory(device)
    print(f"torch {torch.__version__}, {device}; free memory {free / 2**30:.1f} GiB")
    for name, params in MODELS:
        model = create_model(name, params, in_shape=data.info.shape, num_classes=10).eval().to(device)
        views = [
            server_view_of(model, data.train.subset([i]).to(device), data.info, labels_known=True)
            for i in range(args.victims)
        ]
        attack = create_attack("ig", {"iterations": args.steps, "path": "vectorized"})
        base = _reset_peak(device)
        start = time.perf_counter()
        out = attack.reconstruct_many(views, seeds=list(range(args.victims)))
        seconds = time.perf_counter() - start
        peak = _peak(device)
        stats = out[0].stats
        per_victim = stats.get("calibration_bytes_per_victim", float("nan"))
        print(
            f"{name:<10} {args.victims} victims: peak +{(peak - base) / 2**20:8.0f} MiB over the "
            f"{base / 2**20:.0f} MiB before, chunk {int(stats['chunk'])}, "
            f"measured {per_victim / 2**20:.1f} MiB per victim, path {stats['path']}, "
            f"{seconds:.1f} s for {args.steps} steps",
            flush=True,
        )


if __name__ == "__main__":
    main()
