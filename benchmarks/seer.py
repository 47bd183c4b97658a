"""SEER on secure aggregates of digits: its cost (the server's one-off training, one decoding) and what it
recovers, side by side with the same decoder on the honest model and the no-information guess.

For each aggregate shape (clients × batch) SEER is fitted for that many samples (``aggregate_size``) on
the public split, with a 1-hidden-layer MLP of width 1024 (16×16 grey digits), then attacks ``--trials``
natural FedSGD aggregates of private training images (drawn at random, so an aggregate holds zero, one
or several samples above the property's threshold). Reported per shape:

- ``one positive``: share of aggregates with exactly one sample above the threshold (SEER's case);
- over those aggregates, the decoded image's mean SSIM to that sample and the share recovered at
  SSIM ≥ 0.6, for SEER, for the same decoder reading the honest model's aggregate (``honest``: the
  decoder's own prior, what it draws without the model SEER trained) and for the public mean image
  (``guess``);
- ``any``: share of all aggregates in which the decoded image matches *some* sample at SSIM ≥ 0.6
  (SEER, then honest): a loose measure, which the decoder's prior of a plausible digit already meets
  against 16 candidates.

Shapes with the same number of samples give the same figures: the aggregate of FedSGD updates is the
sum of the samples' gradients, however the samples are split among clients (secure aggregation hides
nothing from SEER), and the fit depends on that number only.

    python benchmarks/seer.py                      # 4×4 and 10×16; 10,000 training steps
    python benchmarks/seer.py --shapes 1x16 --steps 2000 --trials 20
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from leakshield.artifacts import FitData
from leakshield.attacks import create_attack
from leakshield.attacks.active.seer_training import property_scores
from leakshield.data import load_dataset
from leakshield.defenses import DefensePipeline
from leakshield.fl import HonestClient, LocalTraining, ServerKnowledge, ThreatModel
from leakshield.fl.secure_aggregation import AggregateMember, observe_aggregate
from leakshield.metrics.image import ssim
from leakshield.models import create_model


def best_match(image: torch.Tensor, truth: torch.Tensor) -> float:
    return max(ssim(image[None], t[None]).item() for t in truth)


def aggregate_view(digits, attack, model, images, clients: int, batch: int, seed: int):
    parts = []
    for c in range(clients):
        data = images.subset(list(range(c * batch, (c + 1) * batch)))
        client = HonestClient(c, data, LocalTraining(), DefensePipeline(), digits.info)
        parts.append(AggregateMember(client, data))
    gens = [[torch.Generator().manual_seed(seed * 1000 + i) for i in range(clients)]]
    knowledge = ServerKnowledge(digits.info, digits.public)
    return observe_aggregate([model], parts, 0, threat=ThreatModel(), rounds=[0], server=attack,
                             knowledge=knowledge, generators=gens).views[0]  # fmt: skip


def measure(digits, clients: int, batch: int, steps: int, trials: int) -> dict[str, float]:
    size = clients * batch
    model = create_model("mlp", {"width": 1024, "hidden_layers": 1}, in_shape=digits.info.shape,
                         num_classes=10, seed=0)  # fmt: skip
    attack = create_attack("seer", {"aggregate_size": size, "steps": steps})
    start = time.perf_counter()
    artifact = attack.fit(FitData(digits.info, digits.public, model, 0, torch.device("cpu"), progress=True))
    fit_s = time.perf_counter() - start
    attack = attack.with_artifact(artifact)
    threshold = artifact.metadata["threshold"]
    secrets = attack.prepare_model(model, ServerKnowledge(digits.info, digits.public)).secrets
    mean = digits.public.x.mean(dim=0)
    gen = torch.Generator().manual_seed(1)
    measures = [f"{who}{m}" for who in ("", "honest_", "guess_") for m in ("to_it", "got_it", "any")]
    keys = ["one", "decode_ms", *measures]
    rows: dict[str, list[float]] = {k: [] for k in keys}
    for trial in range(trials):
        chosen = torch.randperm(len(digits.train), generator=gen)[:size].tolist()
        images = digits.train.subset(chosen)
        view = aggregate_view(digits, attack, model, images, clients, batch, trial)
        start = time.perf_counter()
        found = attack.reconstruct(view).images[0]
        rows["decode_ms"].append(1000 * (time.perf_counter() - start))
        honest_view = aggregate_view(digits, create_attack("ig"), model, images, clients, batch, trial)
        honest = attack.reconstruct(honest_view.__class__(**{**vars(honest_view), "secrets": secrets}))
        positives = (property_scores(images.x, "bright") > threshold).nonzero().flatten()
        rows["one"].append(float(len(positives) == 1))
        for key, image in (("", found), ("honest_", honest.images[0]), ("guess_", mean)):
            rows[f"{key}any"].append(float(best_match(image, images.x) >= 0.6))
            if len(positives) == 1:
                to_it = ssim(image[None], images.x[positives]).item()
                rows[f"{key}to_it"].append(to_it)
                rows[f"{key}got_it"].append(float(to_it >= 0.6))
    out = {k: statistics.mean(v) if v else float("nan") for k, v in rows.items()}
    return {"fit_s": fit_s, **out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["4x4", "10x16"], help="clients x batch")
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--trials", type=int, default=50)
    args = parser.parse_args()
    torch.manual_seed(0)
    digits = load_dataset("digits", {"channels": 1, "size": 16})
    print("| clients × batch | fit (s) | decode (ms) | one positive | SEER: SSIM to it | SEER: ≥ 0.6 "
          "| honest: SSIM to it | honest: ≥ 0.6 | guess: SSIM to it | guess: ≥ 0.6 "
          "| any (SEER / honest) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for shape in args.shapes:
        clients, batch = (int(v) for v in shape.split("x"))
        m = measure(digits, clients, batch, args.steps, args.trials)
        print(f"| {clients} × {batch} | {m['fit_s']:.0f} | {m['decode_ms']:.1f} | {m['one']:.2f} | "
              f"{m['to_it']:.3f} | {m['got_it']:.2f} | {m['honest_to_it']:.3f} | {m['honest_got_it']:.2f} | "
              f"{m['guess_to_it']:.3f} | {m['guess_got_it']:.2f} | {m['any']:.2f} / {m['honest_any']:.2f} |",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
