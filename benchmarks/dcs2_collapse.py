"""Does DCS² send a federation to chance? The final test accuracy, seed by seed, of a FedAvg federation
with one DCS²-defended client: the tanh LeNet of configs/dcs2.yaml on 32-px digits, 10 clients dealt the
training set in turn, SGD momentum 0.9, batch 16; a short protocol (10 rounds, 50 synthesis steps) so
that many seeds fit. A seed at chance (about 0.106 on digits) is a collapse; before the synthesis's NaN
was fixed, Eq. 10 at lr 0.1 collapsed in 1 seed of 6, clamped or not.

    python benchmarks/dcs2_collapse.py                          # 6 seeds × 6 variants, about 6 min
    python benchmarks/dcs2_collapse.py --variants eq10-0.1 eq10-0.1-unboxed --seeds 6
"""

from __future__ import annotations

import argparse
import time

import torch

from leakshield.data import load_dataset
from leakshield.defenses import DefensePipeline, create_defense
from leakshield.fl import FLConfig, LocalTraining
from leakshield.fl.simulation import FederatedSimulation
from leakshield.metrics.utility import accuracy
from leakshield.models import create_model

TANH = {"activation": "tanh", "init_range": None}
#: variant → (learning rate, DCS² parameters beyond the sensitivity rule; None: no defense)
VARIANTS: dict[str, tuple[float, dict | None]] = {
    "none-0.1": (0.1, None),
    "eq10-0.1": (0.1, {}),
    "eq10-div-d-0.1": (0.1, {"normalization": "reference"}),
    "eq10-0.1-unboxed": (0.1, {"boxed": False}),
    "none-0.01": (0.01, None),
    "eq10-0.01": (0.01, {}),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=50, help="DCS²'s synthesis steps")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    digits = load_dataset("digits", {"channels": 3, "size": 32})
    n = len(digits.train)
    clients = [digits.train.subset(list(range(i, n, 10))) for i in range(10)]
    rule = {"sensitive": "fraction", "fraction": 0.1, "seed": 0, "steps": args.steps}
    print(f"| variant | final accuracy per seed ({args.rounds} rounds) | at chance | seconds |")
    print("|---|---|---|---|")
    for name in args.variants:
        lr, extra = VARIANTS[name]
        finals, start = [], time.perf_counter()
        for seed in range(args.seeds):
            torch.manual_seed(seed)
            model = create_model("lenet", TANH, in_shape=digits.info.shape, num_classes=10)
            defenses = [] if extra is None else [create_defense("dcs2", rule | extra)]
            pipeline = DefensePipeline(defenses)
            local = LocalTraining(algorithm="fedavg", local_lr=lr, momentum=0.9, batch_size=16)
            config = FLConfig(clients=10, local=local, defended_clients=[0])
            federation = FederatedSimulation.honest(
                model, clients, config, pipeline, digits.info, public=digits.public, seed=seed
            )
            federation.run(args.rounds)
            finals.append(accuracy(model, digits.test, normalize=digits.info.normalize))
        collapsed = sum(a < 0.2 for a in finals)
        seconds = time.perf_counter() - start
        shown = ", ".join(f"{a:.3f}" for a in finals)
        print(f"| {name} | {shown} | {collapsed} of {args.seeds} | {seconds:.0f} |", flush=True)


if __name__ == "__main__":
    main()
