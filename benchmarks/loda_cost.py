"""LODA's encoding cost on this machine (never asserted): ``--images`` digits encoded by Eq. 4 with
``--steps`` normalized-gradient steps (the paper: 500 per image), all at once (in chunks) versus one image
at a time, in one run; the one-by-one time is measured on ``--sample`` images and scaled.

    python benchmarks/loda_cost.py [--images 1000] [--steps 500] [--sample 20] [--chunk 256]
"""

from __future__ import annotations

import argparse
import time

import torch

from leakshield.data import load_dataset
from leakshield.defenses.loda import (
    ExtractorParams,
    feature_map,
    fitted_extractor,
    obscure,
    obscure_one_by_one,
)
from leakshield.metrics import psnr


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--sample", type=int, default=20)
    parser.add_argument("--chunk", type=int, default=256)
    parser.add_argument("--size", type=int, default=32)
    args = parser.parse_args()
    data = load_dataset("digits", {"size": args.size, "public_fraction": 0.2})
    info = data.info
    settings = ExtractorParams()
    net = fitted_extractor(settings, info, data.public, 0, None, torch.device("cpu"))
    g = feature_map(net, settings)
    pool = data.train.x[: args.images]
    gen = torch.Generator().manual_seed(0)
    starts = data.public.x[torch.randint(len(data.public), (len(pool),), generator=gen)]
    print(f"digits {args.size}×{args.size}, extractor {settings.extractor} (tanh), {args.steps} steps, "
          f"{torch.get_num_threads()} threads")  # fmt: skip
    begin = time.perf_counter()
    out = torch.cat([
        obscure(g, pool[i : i + args.chunk], starts[i : i + args.chunk], info, c=20.0, steps=args.steps)
        for i in range(0, len(pool), args.chunk)
    ])  # fmt: skip
    together = time.perf_counter() - begin
    begin = time.perf_counter()
    single = obscure_one_by_one(g, pool[: args.sample], starts[: args.sample], info, c=20.0, steps=args.steps)
    alone = (time.perf_counter() - begin) * len(pool) / args.sample
    assert torch.allclose(single, out[: args.sample], atol=1e-4), "vectorized and one-by-one encodings differ"
    print(f"{len(pool)} images: vectorized (chunks of {args.chunk}) {together:.1f} s; one at a time "
          f"{alone:.1f} s (scaled from {args.sample}); speed-up {alone / together:.1f}×")  # fmt: skip
    print(f"mean PSNR(x′, x*) {float(psnr(out, pool).mean()):.2f} dB")


if __name__ == "__main__":
    main()
