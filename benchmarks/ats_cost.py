"""The cost of ATS's policy scores on this machine, measured side by side in one run (never asserted).

For each model: S_pri of one policy on ``--images-per-class`` × 10 images (K = 20) with per-sample
gradients in one vectorized pass (``torch.func``) versus one gradient per interpolation point in a Python
loop (the reference's way), and the two accuracy scores (Jacobian, Eq. 12–14; training accuracy over 10
rounds). The paper's figure: ≈ 1 GPU-minute per policy for 100 images (V100).

    python benchmarks/ats_cost.py [--images-per-class 10] [--size 16] [--models resnet20 convnet]
"""

from __future__ import annotations

import argparse
import time

import torch

from leakshield.data import load_dataset
from leakshield.defenses.ats import Policy, accuracy_score, privacy_score, training_accuracy_score
from leakshield.defenses.ats.search import sample_per_class
from leakshield.models import create_model

MODELS = {"resnet20": {}, "convnet": {"width": 16}, "lenet": {}}


def timed(fn):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--images-per-class", type=int, default=10)
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--models", nargs="+", default=["resnet20", "convnet"], choices=sorted(MODELS))
    parser.add_argument("--policy", default="21-13-3")
    args = parser.parse_args()
    data = load_dataset("digits", {"size": args.size})
    info, policy = data.info, Policy.parse(args.policy)
    images = sample_per_class(data.public, info.num_classes, args.images_per_class, 0)
    print(
        f"digits {args.size}×{args.size}, policy {policy}, {len(images)} images, K = 20, "
        f"{torch.get_num_threads()} threads"
    )
    print(
        f"{'model':<10}{'params':>9}{'S_pri vec':>11}{'S_pri loop':>12}{'speed-up':>10}"
        f"{'S_acc jac':>11}{'S_acc train':>13}"
    )
    for name in args.models:
        model = create_model(name, MODELS[name], in_shape=info.shape, num_classes=10, seed=0).eval()
        n = sum(p.numel() for p in model.parameters())
        fast, t_fast = timed(lambda m=model: privacy_score(m, policy, images, info))
        slow, t_slow = timed(lambda m=model: privacy_score(m, policy, images, info, vectorized=False))
        assert torch.allclose(fast.auc, slow.auc, atol=1e-3), "vectorized and loop scores differ"
        _, t_jac = timed(lambda m=model: accuracy_score(m, policy, data.public, info))
        _, t_train = timed(lambda m=model: training_accuracy_score(m, policy, images, info))
        print(
            f"{name:<10}{n:>9}{t_fast:>10.2f}s{t_slow:>11.2f}s{t_slow / t_fast:>9.2f}×{t_jac:>10.2f}s"
            f"{t_train:>12.2f}s"
        )


if __name__ == "__main__":
    main()
