"""DCS²'s cost on this machine: seconds per concealed group (one synthesis of Eq. 9 for the sensitive
samples of one minibatch) and a defended minibatch step as a multiple of a plain one.

    python benchmarks/dcs2_cost.py [--steps 500] [--repeat 2]

Printed, never asserted. The synthesis is a gradient-matching optimization like an attack's (a
double backward per step), so its cost scales with the model like IG's step cost times ``steps``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from leakshield.data import load_dataset
from leakshield.defenses import ClientContext, create_defense
from leakshield.fl import plain_gradient
from leakshield.models import create_model

MODELS = [
    ("lenet", {"activation": "tanh", "init_range": None}),
    ("convnet", {"width": 16}),
    ("dmlp", {}),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(2)
    data = load_dataset("digits", {"channels": 3, "size": 32})
    info = data.info
    batch = data.train.subset(list(range(args.batch)))
    x = info.normalize(batch.x)
    print(
        f"torch {torch.__version__}, 2 threads; minibatch of {args.batch} digits 32×32×3, "
        f"{args.steps} synthesis steps",
        flush=True,
    )
    for name, params in MODELS:
        model = create_model(name, params, in_shape=info.shape, num_classes=10).eval()
        for sensitive in (1, 4):
            rule = {"sensitive": "last-in-batch", "per_batch": sensitive}
            defense = create_defense("dcs2", {**rule, "steps": args.steps})
            context = ClientContext(0, 0, batch, info, torch.Generator(), public=data.public, batch=batch)
            defended, plain = [], []
            for r in range(args.repeat):
                torch.manual_seed(r)
                start = time.perf_counter()
                defense.gradient(model, x, batch.y, context)
                defended.append(time.perf_counter() - start)
                start = time.perf_counter()
                plain_gradient(model, x, batch.y)
                plain.append(time.perf_counter() - start)
            d, p = statistics.median(defended), statistics.median(plain)
            print(
                f"  {name:<8} {sensitive} sensitive in the minibatch: {d:6.2f} s per defended minibatch "
                f"({d / sensitive:5.2f} s per sensitive sample), plain gradient {1000 * p:6.1f} ms "
                f"→ {d / p:7.0f}×",
                flush=True,
            )


if __name__ == "__main__":
    main()
