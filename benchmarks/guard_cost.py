"""What a client guard costs against the training step it precedes, side by side in one run: the
median time of one judgement of each guard and of one FedSGD step (a batch of 16) of the same client,
on the digits (16×16 grey) with an MLP of width 256 and a LeNet, one thread.

    python benchmarks/guard_cost.py --repeats 20
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from leakshield.data import load_dataset
from leakshield.defenses import DefensePipeline, create_defense
from leakshield.fl import HonestClient, LocalTraining
from leakshield.models import create_model

GUARDS = ["row-guard", "loss-guard", "dominance-guard", "drift-guard"]


def median_seconds(run, repeats: int) -> float:
    run()  # warm-up: lazy set-up is not the cost
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    digits = load_dataset("digits", {"channels": 1, "size": 16})
    data = digits.train.subset(list(range(115)))  # a client of a 10-client federation
    local = LocalTraining(batch_size=16)
    print("| model | training step (batch 16) ms | " + " | ".join(f"{g} ms (× step)" for g in GUARDS) + " |")
    print("|---|---|" + "---|" * len(GUARDS))
    for name, params in (("mlp", {"width": 256}), ("lenet", {})):
        model = create_model(name, params, in_shape=digits.info.shape, num_classes=10, seed=0)
        step, costs = guard_costs(model, digits, data, local, args.repeats)
        cells = [f"{seconds * 1e3:.2f} ({seconds / step:.1f})" for seconds in costs]
        print(f"| {name} | {step * 1e3:.2f} | " + " | ".join(cells) + " |", flush=True)


def guard_costs(model, digits, data, local, repeats: int) -> tuple[float, list[float]]:
    """(seconds of one training step, seconds of one judgement per guard)."""
    previous = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(0)
    plain = HonestClient(0, data, local, DefensePipeline(), digits.info)
    step = median_seconds(lambda: plain.fit(model, 0), repeats)
    costs = []
    for guard in GUARDS:
        client = HonestClient(0, data, local, DefensePipeline([create_defense(guard)]), digits.info)
        costs.append(
            median_seconds(lambda c=client: c.inspect(model, 0, generator, previous=previous), repeats)
        )
    return step, costs


if __name__ == "__main__":
    main()
