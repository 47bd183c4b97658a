"""ATS acceptance measurements (issue: seed defense III), printed, never asserted.

1. S_pri (Eq. 10, and its parts) of named policies: the paper's shift policies (3-1-7, 21-13-3), the
   identity and colour/photometric-only policies, on the briefly trained model the search uses.
2. Over N random policies: S_pri against the PSNR that IG (signed Adam, cosine, ``--iterations`` steps,
   2500 in the paper's Fig. 5) reaches against the *transformed* images; Pearson r (the paper: 0.755).
   The attacked model is the same briefly trained model (the paper does not say which model it attacked
   for Fig. 5; training one model per policy is out of reach here). Batch 1, labels known, eval mode.

    python benchmarks/ats_correlation.py [--model resnet20] [--size 16] [--policies 20] [--victims 3]
                                         [--iterations 2500] [--images-per-class 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from leakshield.artifacts import ArtifactCache
from leakshield.attacks import create_attack
from leakshield.data import load_dataset
from leakshield.defenses import DefensePipeline, create_defense
from leakshield.defenses.ats import Policy, privacy_score
from leakshield.defenses.ats.policy import random_policy
from leakshield.defenses.ats.search import SearchParams, cached_privacy_model, sample_per_class
from leakshield.fl import HonestClient, LocalTraining, ThreatModel, observe_victim
from leakshield.metrics import match_reconstructions, psnr
from leakshield.models import create_model

NAMED = {
    "identity": None,
    "3-1-7 (paper, shift)": "3-1-7",
    "21-13-3 (paper, shift)": "21-13-3",
    "7-4-15 (paper, shift)": "7-4-15",
    "12-20-27 (colour only)": "12-20-27",
    "13-18-38 (brightness/contrast)": "13-18-38",
    "0 (invert)": "0",
}


def pearson(a: list[float], b: list[float]) -> float:
    return float(torch.corrcoef(torch.tensor([a, b], dtype=torch.float64))[0, 1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="resnet20")
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--policies", type=int, default=20)
    parser.add_argument("--victims", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=2500)
    parser.add_argument("--images-per-class", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    data = load_dataset("digits", {"size": args.size})
    info = data.info
    params = SearchParams(images_per_class=args.images_per_class)
    model = create_model(args.model, {}, in_shape=info.shape, num_classes=info.num_classes, seed=args.seed)
    trained = cached_privacy_model(model, data.public, info, params, args.seed, ArtifactCache())
    images = sample_per_class(data.public, info.num_classes, params.images_per_class, args.seed)
    print(
        f"model {args.model}, digits {args.size}×{args.size}, {len(images)} score images, K = {params.points}"
    )

    print("\n1. privacy score of named policies (lower = more private)")
    print(f"{'policy':<32}{'AUC mean':>10}{'AUC var':>10}{'S_pri':>9}")
    for label, text in NAMED.items():
        score = privacy_score(trained, Policy.parse(text) if text else None, images, info, seed=args.seed)
        print(f"{label:<32}{score.mean:>10.4f}{score.var:>10.5f}{score.combined():>9.4f}")

    print(
        f"\n2. S_pri vs IG PSNR over {args.policies} random policies ({args.iterations} steps, "
        f"{args.victims} victims each)"
    )
    gen = torch.Generator().manual_seed(args.seed + 7)
    victims = [data.train.subset([i]) for i in torch.randperm(len(data.train), generator=gen)[: args.victims]]
    attack = create_attack("adam-cosine", {"iterations": args.iterations})
    s_pri, psnrs = [], []
    for k in range(args.policies):
        policy = random_policy(gen)
        start = time.perf_counter()
        score = privacy_score(trained, policy, images, info, seed=args.seed)
        pipe = DefensePipeline([create_defense("ats", {"policies": str(policy)})])
        views, truths = [], []
        for v, batch in enumerate(victims):
            client = HonestClient(0, batch, LocalTraining(), pipe, info, model_mode="eval")
            seen = observe_victim(
                [trained],
                batch,
                client,
                threat=ThreatModel(labels_known=True),
                generators=[torch.Generator().manual_seed(1000 * k + v)],
            )
            views.append(seen.views[0])
            truths.append(seen.trace.defended_x)
        recs = attack.reconstruct_many(views, seeds=[1000 * k + v for v in range(len(views))])
        values = []
        for rec, truth in zip(recs, truths, strict=True):
            matched = rec.images[match_reconstructions(rec.images, truth, "ssim")]
            values.append(float(psnr(matched, truth).mean()))
        s_pri.append(score.combined())
        psnrs.append(statistics.fmean(values))
        print(
            f"  {policy!s:<10} S_pri {score.combined():.4f}  PSNR(transformed) {psnrs[-1]:6.2f} dB  "
            f"({time.perf_counter() - start:.0f} s)",
            flush=True,
        )
    print(f"Pearson r(S_pri, PSNR) = {pearson(s_pri, psnrs):.3f} over {len(s_pri)} policies (paper: 0.755)")
    median = statistics.median(s_pri)
    low = [p for s, p in zip(s_pri, psnrs, strict=True) if s <= median]
    high = [p for s, p in zip(s_pri, psnrs, strict=True) if s > median]
    print(
        f"mean PSNR of the policies at or below the median S_pri {statistics.fmean(low):.2f} dB, "
        f"above it {statistics.fmean(high):.2f} dB"
    )


if __name__ == "__main__":
    main()
