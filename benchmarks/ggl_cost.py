"""GGL against Inverting Gradients at the same step budget, in one run (measurements, never asserted):
time per victim, SSIM, and how often the reconstruction shows the right digit.

The setting of configs/ggl.yaml: FedSGD gradients of single digits (16×16 grey) of the untrained ConvNet
(width 32), labels known, ``--victims`` training images (seeded). The generator prior is trained on the
public split (timed, or loaded from the artifact cache when ``leakshield run configs/ggl.yaml`` already
trained it). "Right digit": the class a LeNet trained on the public split assigns to the reconstruction
equals the victim's label; the same classifier's accuracy on the victims themselves is printed as the ceiling.

    python benchmarks/ggl_cost.py [--steps 200] [--victims 8] [--cma-generations 20] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import time

import torch

from leakshield.artifacts import ArtifactCache, FitData
from leakshield.attacks import create_attack
from leakshield.data import load_dataset
from leakshield.defenses.loda.extractor import ExtractorParams, fitted_extractor
from leakshield.fl import server_view_of
from leakshield.metrics import ssim
from leakshield.models import create_model


def timed(attack, views, seeds, device):
    if device.type == "cuda":
        torch.cuda.synchronize()
    begin = time.perf_counter()
    recs = attack.reconstruct_many(views, seeds=seeds)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return recs, (time.perf_counter() - begin) / len(views)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=200, help="Adam steps of every attack")
    parser.add_argument("--victims", type=int, default=8)
    parser.add_argument("--cma-generations", type=int, default=20, help="0 skips CMA-ES")
    parser.add_argument("--generator-steps", type=int, default=3000)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    data = load_dataset("digits", {"channels": 1, "size": 16})
    info = data.info
    name = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"CPU, {torch.get_num_threads()} threads"
    )
    print(f"device: {name}; {args.victims} victims, {args.steps} steps per attack")
    model = create_model("convnet", {"width": 32}, in_shape=info.shape, num_classes=10, seed=0)
    model = model.to(device).eval()
    gen = torch.Generator().manual_seed(0)
    picks = torch.randperm(len(data.train), generator=gen)[: args.victims].tolist()
    victims = [data.train.subset([i]).to(device) for i in picks]
    views = [server_view_of(model, v, info, labels_known=True) for v in victims]
    truth = torch.cat([v.x for v in victims]).cpu()
    labels = torch.cat([v.y for v in victims]).cpu()
    seeds = list(range(len(views)))
    cache = ArtifactCache()

    prior = {"generator_steps": args.generator_steps}
    begin = time.perf_counter()
    ggl = create_attack("ggl", {**prior, "iterations": args.steps})
    ggl = ggl.with_artifact(ggl.fit(FitData(info, data.public.to(device), None, 0, device, True, cache)))
    print(f"generator prior ({args.generator_steps} steps, cached after the first run): "
          f"{time.perf_counter() - begin:.1f} s")  # fmt: skip
    classifier = fitted_extractor(ExtractorParams(), info, data.public, 0, cache, torch.device("cpu"))

    def right(images: torch.Tensor) -> float:
        with torch.no_grad():
            return float((classifier(info.normalize(images)).argmax(1) == labels).float().mean())

    print(f"public-split LeNet on the true victims: {right(truth):.0%} right")
    rows = [("ggl (Adam, vectorized)", ggl)]
    looped = create_attack("ggl", {**prior, "iterations": args.steps, "vectorize": False})
    rows.append(("ggl (Adam, one by one)", looped.with_artifact(ggl.artifact)))
    rows.append(("ig", create_attack("ig", {"iterations": args.steps})))
    if args.cma_generations:
        cma = create_attack("ggl-cma", {**prior, "iterations": args.cma_generations})
        rows.append((f"ggl-cma ({args.cma_generations} generations)", cma.with_artifact(ggl.artifact)))
    for label, attack in rows:
        recs, seconds = timed(attack, views, seeds, device)
        images = torch.cat([r.images for r in recs]).cpu()
        score = float(ssim(images, truth).mean())
        print(f"{label:32s} {seconds:7.2f} s/victim   SSIM {score:.3f}   right digit {right(images):.0%}")


if __name__ == "__main__":
    main()
