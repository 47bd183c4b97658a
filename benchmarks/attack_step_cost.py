"""Cost of one gradient-inversion step relative to a plain forward + backward of the same model.

One attack step = forward, backward with create_graph (the dummy gradient), distance to the target, and
a second backward w.r.t. the image. Its FLOPs are ≈ 2.7× a plain forward + backward, so the
ratio printed here says how much Python/operator overhead the eager step adds on this machine.

    python benchmarks/attack_step_cost.py [--repeats 30] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from leakshield.attacks.passive.inversion import cosine_distance
from leakshield.loss import cross_entropy
from leakshield.models import create_model


def timed(fn, repeats: int) -> float:
    fn()  # warm-up
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def measure(name: str, params: dict | None, repeats: int) -> tuple[float, float]:
    model = create_model(name, params, in_shape=(3, 32, 32), num_classes=10).eval()
    weights = list(model.parameters())
    x_true, y = torch.randn(1, 3, 32, 32), torch.tensor([3])
    target = [g.detach() for g in torch.autograd.grad(cross_entropy(model(x_true), y), weights)]
    x = torch.randn(1, 3, 32, 32, requires_grad=True)

    def plain() -> None:
        torch.autograd.grad(cross_entropy(model(x_true), y), weights)

    def attack_step() -> None:
        dummy = torch.autograd.grad(cross_entropy(model(x), y), weights, create_graph=True)
        torch.autograd.grad(cosine_distance(dummy, target), x)

    return timed(plain, repeats), timed(attack_step, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads, batch 1, 32×32×3, median of {args.repeats}")
    print(f"{'model':<14}{'fwd+bwd ms':>12}{'attack step ms':>16}{'ratio':>8}")
    for name, params in (("lenet", None), ("convnet", {"width": 32}), ("resnet20", None)):
        plain, step = measure(name, params, args.repeats)
        label = name + (f"-{params['width']}" if params else "")
        print(f"{label:<14}{plain * 1e3:>12.2f}{step * 1e3:>16.2f}{step / plain:>8.2f}")


if __name__ == "__main__":
    main()
