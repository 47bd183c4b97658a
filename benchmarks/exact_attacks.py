"""The exact attacks' regimes, measured on real images: SPEAR by batch size beside the analytic attack
(an MLP of 2 × 1024 ReLU units, untrained; on CIFAR-10 images and on the embedded digits at 16 px),
APRIL at batch 1 and 4 on the pre-norm ViT (embedding route)
and on APRIL's Fig. 1A block (attention route), whether SPEAR's structure holds on a ViT's patch
embedding, and (``--parts subsets``) how many row subsets SPEAR's search needs against 2^(B−1)·H_B.
Each batch is one FedSGD gradient; an image counts as exact at SSIM ≥ 0.99 (after matching).

    python benchmarks/exact_attacks.py --victims DIR/cifar10_victims128.npz --out runs/exact_attacks.json

``--samples`` sets SPEAR's budget of row subsets (default its own, 262,144) and ``--parts`` what to run
(the larger budget's regime: ``--samples 2097152 --parts spear --batches 16 20``). The .npz
holds ``images`` (N×32×32×3 uint8) and ``labels``. Run it alone (2 cores: one thread each).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from leakshield.attacks import create_attack
from leakshield.data import ImageSet, load_dataset
from leakshield.data.types import DatasetInfo
from leakshield.fl import server_view_of
from leakshield.metrics import match_reconstructions, ssim
from leakshield.models import create_model

CIFAR = DatasetInfo("cifar10", (3, 32, 32), 10, (0.4915, 0.4823, 0.4468), (0.2470, 0.2435, 0.2616))
EXACT = 0.99


def load(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    with np.load(path, allow_pickle=False) as npz:
        images = torch.from_numpy(npz["images"]).permute(0, 3, 1, 2).float() / 255.0
        return images.contiguous(), torch.from_numpy(npz["labels"]).long()


def scores(images: torch.Tensor, truth: torch.Tensor) -> list[float]:
    order = match_reconstructions(images, truth)
    return ssim(images[order], truth).tolist()  # per image


def attack(
    name: str, params: dict, model: torch.nn.Module, data: ImageSet, seed: int, info: DatasetInfo = CIFAR
) -> dict:
    start = time.perf_counter()
    view = server_view_of(model, data, info, labels_known=True)
    rec = create_attack(name, params).reconstruct(view, seed=seed)
    seconds = time.perf_counter() - start
    values = scores(rec.images, data.x)
    return {"ssim": values, "seconds": seconds, "stats": rec.stats}


def spear_regime(
    images, labels, batches: list[int], trials: int, info: DatasetInfo = CIFAR, spear: dict | None = None
) -> list[dict]:
    rows = []
    for batch in batches:
        runs = {"spear": [], "analytic": []}
        for t in range(trials):
            model = create_model("mlp", {"width": 1024}, in_shape=info.shape, num_classes=10, seed=t)
            start = (t * batch) % (len(images) - batch)
            data = ImageSet(images[start : start + batch], labels[start : start + batch])
            runs["spear"].append(attack("spear", spear or {}, model, data, seed=t, info=info))
            runs["analytic"].append(attack("analytic", {}, model, data, seed=t, info=info))
        row = {"batch": batch, "trials": trials, "spear_params": spear or {}}
        for name, found in runs.items():
            values = [v for run in found for v in run["ssim"]]
            row[name] = {
                "exact_images": sum(v >= EXACT for v in values),
                "images": len(values),
                "ssim_mean": statistics.fmean(values),
                "seconds_mean": statistics.fmean(run["seconds"] for run in found),
            }
        row["spear"]["directions"] = [run["stats"]["directions"] for run in runs["spear"]]
        row["spear"]["subsets"] = [run["stats"]["subsets"] for run in runs["spear"]]
        row["spear"]["relu_agreement"] = [round(run["stats"]["relu_agreement"], 4) for run in runs["spear"]]
        rows.append(row)
        print(
            f"SPEAR {info.name} batch {batch}: "
            f"{row['spear']['exact_images']}/{row['spear']['images']} exact, "
            f"{row['spear']['seconds_mean']:.1f} s; analytic {row['analytic']['exact_images']} exact",
            flush=True,
        )
    return rows


def april_regime(images, labels, victims: int, seeds: int) -> list[dict]:
    rows = []
    for model_name in ("vit", "vit-april"):
        for batch in (1, 4):
            values, seconds = [], []
            for seed in range(seeds):
                model = create_model(model_name, in_shape=CIFAR.shape, num_classes=10, seed=seed)
                for v in range(victims):
                    data = ImageSet(images[v * batch : (v + 1) * batch], labels[v * batch : (v + 1) * batch])
                    run = attack("april", {}, model, data, seed=seed)
                    values += run["ssim"]
                    seconds.append(run["seconds"])
            rows.append(
                {
                    "model": model_name,
                    "batch": batch,
                    "images": len(values),
                    "exact_images": sum(v >= EXACT for v in values),
                    "ssim_mean": statistics.fmean(values),
                    "ssim_min": min(values),
                    "seconds_mean": statistics.fmean(seconds),
                }
            )
            print(
                f"APRIL {model_name} batch {batch}: {rows[-1]['exact_images']}/{len(values)} exact",
                flush=True,
            )
    return rows


def patch_embedding_structure(images, labels) -> dict:
    """SPEAR's two preconditions on the ViT's patch embedding at batch 1: a low-rank weight gradient
    (rank < min of its shape) and exact zeros in the gradient of its output (a ReLU after it)."""
    model = create_model("vit", in_shape=CIFAR.shape, num_classes=10, seed=0)
    x = CIFAR.normalize(images[:1])
    captured = {}
    hook = model.features.patch_embed.register_forward_hook(
        lambda module, inputs, output: (output.retain_grad(), captured.setdefault("out", output), None)[-1]
    )
    F.cross_entropy(model(x), labels[:1]).backward()
    hook.remove()
    grad = model.features.patch_embed.weight.grad.flatten(1).double()
    out_grad = captured["out"].grad
    singular = torch.linalg.svdvals(grad)
    return {
        "weight_gradient_shape": list(grad.shape),
        "weight_gradient_rank": int((singular > 1e-6 * singular[0]).sum()),
        "output_gradient_zero_fraction": float((out_grad == 0).double().mean()),
    }


def zero_pattern(model: torch.nn.Module, data: ImageSet, info: DatasetInfo) -> torch.Tensor:
    """Where ∂L/∂Z of the first Linear layer is exactly zero (m × B): the columns SPEAR's search looks for."""
    captured = {}
    layer = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))
    hook = layer.register_forward_hook(
        lambda module, inputs, output: (output.retain_grad(), captured.setdefault("z", output), None)[-1]
    )
    F.cross_entropy(model(info.normalize(data.x)), data.y).backward()
    hook.remove()
    return (captured["z"].grad == 0).T.contiguous()


def draws_until_every_column(zeros: torch.Tensor, generator: torch.Generator, chunk: int = 8192) -> int:
    """Row subsets of size B−1 drawn until each column has had one inside its zeros and no other
    column's (a kernel of dimension 1: that column's direction)."""
    m, batch = zeros.shape
    first = torch.full((batch,), -1)
    drawn = 0
    while bool((first < 0).any()):
        subsets = torch.rand(chunk, m, generator=generator).topk(batch - 1, dim=1).indices
        inside = zeros[subsets].all(dim=1)  # chunk × B
        alone = inside & (inside.sum(dim=1, keepdim=True) == 1)
        hits = torch.where(alone.any(dim=0), alone.double().argmax(dim=0), -1)
        first = torch.where((first < 0) & (hits >= 0), drawn + hits, first)
        drawn += chunk
    return int(first.max()) + 1


def subsets_needed(images, labels, batches: list[int], trials: int, draws: int) -> list[dict]:
    """Lemma 5.2's count on real zero patterns, without solving a kernel: a subset lands inside one given
    column's zeros with probability p_i = C(z_i, B−1)/C(m, B−1) ≈ 2^−(B−1); collecting all B columns is
    a coupon collector's problem, E ≈ 2^(B−1)·H_B for equal p_i (exactly ∫ 1 − Π(1 − e^{−p_i t}) dt
    for the measured p_i, Poissonized), simulated ``draws`` times per batch (same models and victims as
    :func:`spear_regime`)."""
    rows = []
    for batch in batches:
        harmonic = sum(1 / k for k in range(1, batch + 1))
        expected, simulated = [], []
        for t in range(trials):
            model = create_model("mlp", {"width": 1024}, in_shape=CIFAR.shape, num_classes=10, seed=t)
            start = (t * batch) % (len(images) - batch)
            zeros = zero_pattern(
                model, ImageSet(images[start : start + batch], labels[start : start + batch]), CIFAR
            )
            m = zeros.shape[0]
            p = np.array([math.comb(int(z), batch - 1) / math.comb(m, batch - 1) for z in zeros.sum(dim=0)])
            grid = np.linspace(0, 60 / p.min(), 200_001)
            expected.append(float(np.trapezoid(1 - np.prod(1 - np.exp(-np.outer(grid, p)), axis=1), grid)))
            generator = torch.Generator().manual_seed(t)
            simulated += [draws_until_every_column(zeros, generator) for _ in range(draws)]
        rows.append(
            {
                "batch": batch,
                "harmonic_formula": 2 ** (batch - 1) * harmonic,
                "old_formula": 2 ** (batch - 1) * batch * math.log(batch),
                "expected_measured_p": statistics.fmean(expected),
                "simulated_mean": statistics.fmean(simulated),
                "simulated_median": statistics.median(simulated),
                "draws": len(simulated),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def spear_table(title: str, rows: list[dict]) -> None:
    print(f"\n{title}")
    print("| batch | SPEAR exact | SPEAR SSIM | directions | SPEAR s | analytic exact | analytic SSIM |")
    print("|---:|---:|---:|---|---:|---:|---:|")
    for row in rows:
        s, a = row["spear"], row["analytic"]
        print(
            f"| {row['batch']} | {s['exact_images']}/{s['images']} | {s['ssim_mean']:.3f} | "
            f"{', '.join(str(int(d)) for d in s['directions'])} | {s['seconds_mean']:.1f} | "
            f"{a['exact_images']}/{a['images']} | {a['ssim_mean']:.3f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--victims", type=Path, required=True, help="the .npz of real images")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 12, 16, 20, 24])
    parser.add_argument("--trials", type=int, default=3, help="SPEAR: batches (and model seeds) per size")
    parser.add_argument("--samples", type=int, default=None, help="SPEAR's budget (default: its own)")
    parser.add_argument(
        "--parts",
        nargs="+",
        choices=["april", "spear", "digits", "subsets"],
        default=["april", "spear", "digits"],
    )
    parser.add_argument("--draws", type=int, default=10, help="subsets: simulated searches per batch")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    images, labels = load(args.victims)
    spear = {"samples": args.samples} if args.samples else {}
    result = {}
    if "april" in args.parts:
        result["april"] = april_regime(images, labels, victims=8, seeds=2)
        result["patch_embedding"] = patch_embedding_structure(images, labels)
        print(json.dumps(result["patch_embedding"]))
    if "spear" in args.parts:
        result["spear"] = spear_regime(images, labels, args.batches, args.trials, spear=spear)
    if "digits" in args.parts:
        digits = load_dataset("digits", {"channels": 1, "size": 16})
        sizes = [b for b in args.batches if b <= 16]
        result["spear_digits"] = spear_regime(
            digits.train.x, digits.train.y, sizes, args.trials, digits.info, spear
        )
    if "subsets" in args.parts:
        result["subsets"] = subsets_needed(images, labels, args.batches, args.trials, args.draws)
        print("\n| batch | 2^(B−1)·H_B | E for the measured p_i | simulated mean | median | 2^(B−1)·B·ln B |")
        print("|---:|---:|---:|---:|---:|---:|")
        for row in result["subsets"]:
            print(
                f"| {row['batch']} | {row['harmonic_formula']:,.0f} | {row['expected_measured_p']:,.0f} | "
                f"{row['simulated_mean']:,.0f} | {row['simulated_median']:,.0f} | {row['old_formula']:,.0f} |"
            )
    for key in ("spear", "spear_digits"):
        if key in result:
            spear_table(key, result[key])
    if "april" in result:
        print("\n| model | batch | exact | SSIM mean | SSIM min | s |")
        print("|---|---:|---:|---:|---:|---:|")
    for row in result.get("april", []):
        print(
            f"| {row['model']} | {row['batch']} | {row['exact_images']}/{row['images']} | "
            f"{row['ssim_mean']:.4f} | {row['ssim_min']:.4f} | {row['seconds_mean']:.3f} |"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
