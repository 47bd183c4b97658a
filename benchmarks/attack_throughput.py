"""Victims·steps per second of gradient inversion: one victim at a time vs all victims in one
vectorized step (and, optionally, that step compiled with torch.compile).

Setting: 16 victims (batch 1 each, digits 32×32×3), untrained LeNet and IG-ConvNet, the ``ig`` preset
(cosine + TV, signed Adam). Each mode is warmed up first; all numbers come from this one run.

    python benchmarks/attack_throughput.py [--victims 16] [--steps 100] [--threads 2] [--compile]
"""

from __future__ import annotations

import argparse
import time

import torch

from leakshield.attacks import create_attack
from leakshield.attacks.inversion.vectorized import VectorizedObjective
from leakshield.data import load_dataset
from leakshield.fl import server_view_of
from leakshield.models import create_model


def victim_views(model_name: str, params: dict | None, victims: int):
    data = load_dataset("digits", {"channels": 3, "size": 32})
    model = create_model(model_name, params, in_shape=data.info.shape, num_classes=10)
    return [
        server_view_of(model, data.train.subset([i]), data.info, labels_known=True) for i in range(victims)
    ]


def one_by_one(views, steps: int) -> float:
    attack = create_attack("ig", {"iterations": steps, "vectorize": False})
    attack.reconstruct(views[0], seed=0)  # warm-up
    start = time.perf_counter()
    for k, view in enumerate(views):
        attack.reconstruct(view, seed=k)
    return len(views) * steps / (time.perf_counter() - start)


def vectorized(views, steps: int) -> float:
    attack = create_attack("ig", {"iterations": steps})
    attack.reconstruct_many(views, seeds=list(range(len(views))))  # warm-up
    start = time.perf_counter()
    attack.reconstruct_many(views, seeds=list(range(len(views))))
    return len(views) * steps / (time.perf_counter() - start)


def compiled(views, steps: int) -> tuple[float, float] | None:
    """Steady-state throughput of the compiled vectorized step (+ Adam), and the compile time."""
    attack = create_attack("ig", {"iterations": steps})
    first = views[0]
    names = attack._matched_names(first.model, first)
    objective = VectorizedObjective(
        first.model, names, distance="cosine", weights=[1.0] * len(names), tv=1e-4
    )
    x = torch.randn(len(views), 1, *first.data_info.shape, requires_grad=True)
    labels = torch.stack([v.labels for v in views])
    targets = [torch.stack([v.update.delta[n] for v in views]) for n in names]
    start = time.perf_counter()
    if not objective.compile(x.detach(), labels, targets):
        return None
    compile_seconds = time.perf_counter() - start
    opt = torch.optim.Adam([x], lr=0.1)
    for _ in range(3):  # warm-up
        objective.step(x, labels, *targets)
    start = time.perf_counter()
    for _ in range(steps):
        grad_x, _ = objective.step(x, labels, *targets)
        x.grad = grad_x.sign()
        opt.step()
    return len(views) * steps / (time.perf_counter() - start), compile_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--victims", type=int, default=16)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--compile", action="store_true", help="also measure torch.compile (slow start)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {args.threads} threads, {args.victims} victims, ig preset, "
        "victims·steps per second"
    )
    for name, params, steps in (
        ("lenet", None, args.steps),
        ("convnet", {"width": 32}, max(args.steps // 10, 5)),
    ):
        views = victim_views(name, params, args.victims)
        loop = one_by_one(views, steps)
        vec = vectorized(views, steps)
        label = name + (f"-{params['width']}" if params else "")
        line = f"{label:<11} one-by-one {loop:8.1f}   vectorized {vec:8.1f}   ratio {vec / loop:5.2f}×"
        if args.compile:
            result = compiled(views, steps)
            line += (
                "   compiled: failed, eager fallback"
                if result is None
                else f"   compiled {result[0]:8.1f} ({result[0] / loop:5.2f}×, compile {result[1]:.0f} s)"
            )
        print(line, flush=True)


if __name__ == "__main__":
    main()
