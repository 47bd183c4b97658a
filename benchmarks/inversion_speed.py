"""Time the gradient-inversion engine's common paths, to compare two versions of the code side by side:
100 IG steps on a FedSGD batch of 16 (LeNet-tanh, digits at 16 px) and 20 GradInversion steps on
ResNet-18 (width 16, batch 4, eval mode, 32 px). Median of ``--repeats`` runs after the first, 1 thread.

    git worktree add /tmp/before <commit>
    python benchmarks/inversion_speed.py --label after
    cd /tmp/before && PYTHONPATH=src python $OLDPWD/benchmarks/inversion_speed.py --label before

Run the two alternately, twice each, alone on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from leakshield.attacks import create_attack
from leakshield.data import load_dataset
from leakshield.fl import server_view_of
from leakshield.models import create_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", default="this code")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    small = load_dataset("digits", {"channels": 1, "size": 16})
    large = load_dataset("digits", {"channels": 1, "size": 32})
    lenet = create_model("lenet", {"activation": "tanh", "init_range": None}, in_shape=small.info.shape,
                         num_classes=10)  # fmt: skip
    resnet = create_model("resnet18", {"width": 16}, in_shape=large.info.shape, num_classes=10)
    cases = {
        "ig, batch 16, 100 steps": (
            "ig",
            {"iterations": 100},
            server_view_of(lenet, small.train.subset(list(range(16))), small.info, labels_known=True),
        ),
        "gradinversion, resnet18, 20 steps": (
            "gradinversion",
            {"iterations": 20},
            server_view_of(resnet, large.train.subset(list(range(4))), large.info, labels_known=True),
        ),
    }
    for name, (attack, params, view) in cases.items():
        times = []
        for _ in range(args.repeats + 1):
            start = time.perf_counter()
            create_attack(attack, params).reconstruct(view, seed=0)
            times.append(time.perf_counter() - start)
        print(f"{args.label}: {name}: median {statistics.median(times[1:]):.3f} s "
              f"({', '.join(f'{t:.3f}' for t in times[1:])})")  # fmt: skip


if __name__ == "__main__":
    main()
