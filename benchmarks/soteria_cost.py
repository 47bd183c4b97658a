"""Cost of Soteria's representation scores: batched Jacobian rows (leakshield) vs one backward per
feature (the reference), and per-image cost, on LeNet and ConvNet-16 (untrained, eval mode).

    python benchmarks/soteria_cost.py [--batch 4] [--repeat 3]

Prints seconds per call, the ratio loop / batched measured in this run, and the maximum relative
difference of the scores (they must agree).
"""

from __future__ import annotations

import argparse
import time

import torch

from leakshield.defenses.soteria import representation_scores
from leakshield.models import create_model


def loop_scores(r: torch.Tensor, x: torch.Tensor, delta: float) -> torch.Tensor:
    scores = torch.empty(r.shape[1])
    for f in range(r.shape[1]):
        (jac,) = torch.autograd.grad(r[:, f].sum(), x, retain_graph=True)
        scores[f] = (jac.flatten(1).norm(dim=1) / (r[:, f].detach().abs() + delta)).sum()
    return scores


def best_of(fn, args: tuple, repeat: int) -> tuple[float, torch.Tensor]:
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn(*args)
        times.append(time.perf_counter() - start)
    return min(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch}")
    for name, params in (("lenet", {"init_range": None}), ("convnet", {"width": 16})):
        model = create_model(name, params, in_shape=(3, 32, 32), num_classes=10, seed=0).eval()
        x = torch.rand(args.batch, 3, 32, 32).requires_grad_(True)
        r = model.features(x).flatten(1)
        loop_s, loop = best_of(loop_scores, (r, x, 0.1), args.repeat)
        for chunk in (32, 128):
            batched_s, batched = best_of(representation_scores, (r, x, 0.1, chunk), args.repeat)
            diff = float(((batched - loop).abs() / loop.abs().clamp_min(1e-12)).max())
            print(
                f"{name:8s} features {r.shape[1]:4d}  chunk {chunk:3d}: batched {batched_s:6.2f} s, "
                f"loop {loop_s:6.2f} s, loop/batched {loop_s / batched_s:4.2f}×, "
                f"{batched_s / args.batch:.3f} s per image, max rel. diff {diff:.1e}",
                flush=True,
            )


if __name__ == "__main__":
    main()
