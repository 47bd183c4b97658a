"""Cost and recovery of the attacks on secure aggregates, measured side by side in one run, and the two
steps the Cocktail Party attack adds to the paper's optimizer (see
``leakshield/attacks/aggregate/cocktail_party.py``).

1. Per attack: the server's work (preparing the model sent to each client) and the reconstruction time
   on a FedSGD aggregate of ``--clients`` clients × ``--batch`` digits each (16×16 grey, a 1-hidden-layer
   MLP of width 1024), and the share of all the aggregate's samples recovered at SSIM ≥ 0.6.
2. Cocktail Party on the 128 CIFAR-10 victims of PRECODE (4 clients × 8 photos, an MLP of width 256):
   share recovered by ICA on the raw gradient rows, on their pixel differences, and with the bias
   ratio for scale and sign.
3. Label counts of aggregates: iLRG (embeddings), the public-split prediction estimate, and the sign
   rule leakshield's optimization attacks use, over ``--seeds`` model seeds.

    python benchmarks/aggregation.py --cifar ../shared/data/cifar10_victims128.npz
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from leakshield.attacks import Reconstruction, create_attack, label_accuracy
from leakshield.attacks.aggregate.cocktail_party import fix_sign_and_scale, separate
from leakshield.attacks.passive.labels import infer_labels
from leakshield.data import ImageSet, load_dataset
from leakshield.data.types import DatasetInfo
from leakshield.defenses import DefensePipeline
from leakshield.experiment.evaluation import score_victim
from leakshield.fl import HonestClient, LocalTraining, ServerKnowledge, ThreatModel
from leakshield.fl.secure_aggregation import AggregateMember, observe_aggregate
from leakshield.models import create_model

ATTACKS = [
    ("imprint", {"bins": 1024}),
    ("loki", {"bins": 64}),
    ("trap-weights", {}),
    ("fishing", {"target_class": 0, "iterations": 1000}),
    ("cocktail-party", {}),
    ("ilrg", {"probabilities": "public"}),
]
CIFAR = DatasetInfo("cifar10", (3, 32, 32), 10, (0.4915, 0.4823, 0.4468), (0.2470, 0.2435, 0.2616))


def members_of(images: torch.Tensor, labels: torch.Tensor, info: DatasetInfo, clients: int, batch: int):
    out = []
    for c in range(clients):
        data = ImageSet(images[c * batch : (c + 1) * batch], labels[c * batch : (c + 1) * batch])
        out.append(AggregateMember(HonestClient(c, data, LocalTraining(), DefensePipeline(), info), data))
    return out


def share_recovered(reconstruction: Reconstruction, truth: ImageSet) -> float:
    score = score_victim(reconstruction, truth.x, truth.y)
    return sum(s >= 0.6 for s in score.per_image["ssim"]) / len(truth)


def attack_costs(clients: int, batch: int) -> None:
    data = load_dataset("digits", {"channels": 1, "size": 16})
    info, public = data.info, data.public
    parts = members_of(data.train.x, data.train.y, info, clients, batch)
    truth = ImageSet(torch.cat([p.batch.x for p in parts]), torch.cat([p.batch.y for p in parts]))
    print(f"## Attacks on an aggregate of {clients} clients × {batch} digits (MLP 1×1024)\n")
    print(
        "| attack | prepare s (all clients) | observe s | reconstruct s | recovered (SSIM ≥ 0.6) | labels |"
    )
    print("|---|---|---|---|---|---|")
    for name, params in ATTACKS:
        model = create_model(
            "mlp", {"hidden_layers": 1, "width": 1024}, in_shape=info.shape, num_classes=10, seed=0
        )
        attack = create_attack(name, params)
        knowledge = ServerKnowledge(info, public)
        start = time.perf_counter()
        for slot in range(clients):
            attack.prepare_model(model, ServerKnowledge(info, public, slot=slot, slots=clients))
        prepare = time.perf_counter() - start
        gens = [[torch.Generator().manual_seed(i) for i in range(clients)]]
        start = time.perf_counter()
        view = observe_aggregate([model], parts, 0, threat=ThreatModel(), rounds=[0], server=attack,
                                 knowledge=knowledge, generators=gens).views[0]  # fmt: skip
        observe = time.perf_counter() - start - prepare / clients  # the victim's own prepare is inside
        start = time.perf_counter()
        try:
            rec = attack.reconstruct(view, seed=0)
        except ValueError as exc:  # an attack that cannot work at this size says why
            print(f"| {name} | {prepare:.3f} | {max(observe, 0):.3f} | refused: {exc} | — | — |")
            continue
        seconds = time.perf_counter() - start
        labels = label_accuracy(rec.labels, truth.y) if rec.labels is not None else float("nan")
        print(f"| {name} | {prepare:.3f} | {max(observe, 0):.3f} | {seconds:.3f} | "
              f"{share_recovered(rec, truth):.3f} | {labels:.3f} |")  # fmt: skip
    print()


def cocktail_party_steps(path: Path) -> None:
    with np.load(path, allow_pickle=False) as npz:
        images = torch.from_numpy(npz["images"]).permute(0, 3, 1, 2).float() / 255.0
        labels = torch.from_numpy(npz["labels"]).long()
    parts = members_of(images, labels, CIFAR, 4, 8)
    truth = ImageSet(images[:32], labels[:32])
    model = create_model(
        "mlp", {"hidden_layers": 1, "width": 256}, in_shape=CIFAR.shape, num_classes=10, seed=0
    )
    gens = [[torch.Generator().manual_seed(i) for i in range(4)]]
    view = observe_aggregate([model], parts, 0, threat=ThreatModel(), rounds=[0], generators=gens).views[0]
    grad_w = view.update.delta["features.1.weight"].double()
    grad_b = view.update.delta["features.1.bias"].double()
    mean = images[64:].double().mean(0)
    from sklearn.decomposition import FastICA

    raw = FastICA(n_components=32, whiten="unit-variance", max_iter=2000, tol=1e-5, random_state=0)
    raw_unmixing = torch.from_numpy(raw.fit(grad_w.T.numpy()).components_)
    unmixing = separate(grad_w, 32, CIFAR.shape, iterations=2000, tolerance=1e-5, seed=0)

    def minmax(u: torch.Tensor) -> Reconstruction:
        return Reconstruction(fix_sign_and_scale(u @ grad_w, mean).float().view(-1, *CIFAR.shape))

    ratio = (unmixing @ grad_w) / (unmixing @ grad_b)[:, None]
    exact = Reconstruction(CIFAR.denormalize(ratio.float().view(-1, *CIFAR.shape)).clamp(0, 1))
    print("## Cocktail Party on 32 CIFAR-10 photos (4 clients × 8, MLP 1×256)\n")
    print("| unmixing estimated on | scale and sign | recovered (SSIM ≥ 0.6) |\n|---|---|---|")
    print(f"| raw gradient rows (the paper's objective without its TV prior) | public mean, min-max | "
          f"{share_recovered(minmax(raw_unmixing), truth):.3f} |")  # fmt: skip
    print(f"| pixel differences | public mean, min-max | {share_recovered(minmax(unmixing), truth):.3f} |")
    default = share_recovered(exact, truth)
    print(f"| pixel differences | bias gradient (leakshield's default) | {default:.3f} |\n")


def label_counts(seeds: int) -> None:
    data = load_dataset("digits", {"channels": 1, "size": 16})
    print(f"## Label count accuracy of aggregates (digits, MLP 1×64; mean over {seeds} model seeds)\n")
    print("| clients × batch | iLRG (embeddings) | public-split prediction | sign rule |\n|---|---|---|---|")
    for clients, batch in ((1, 16), (1, 64), (4, 8), (10, 16)):
        scores: dict[str, list[float]] = {"embeddings": [], "public": [], "rule": []}
        parts = members_of(data.train.x, data.train.y, data.info, clients, batch)
        truth = torch.cat([p.batch.y for p in parts])
        for seed in range(seeds):
            model = create_model("mlp", {"hidden_layers": 1, "width": 64}, in_shape=data.info.shape,
                                 num_classes=10, seed=seed)  # fmt: skip
            for mode in ("embeddings", "public"):
                attack = create_attack("ilrg", {"probabilities": mode})
                gens = [[torch.Generator().manual_seed(i) for i in range(clients)]]
                knowledge = ServerKnowledge(data.info, data.public)
                view = observe_aggregate([model], parts, 0, threat=ThreatModel(), rounds=[0], server=attack,
                                         knowledge=knowledge, generators=gens).views[0]  # fmt: skip
                scores[mode].append(label_accuracy(attack.reconstruct(view).labels, truth))
            scores["rule"].append(
                label_accuracy(infer_labels(view.update.delta["classifier.weight"], len(truth)), truth)
            )
        print(
            f"| {clients} × {batch} | "
            + " | ".join(f"{statistics.fmean(v):.3f}" for v in scores.values())
            + " |"
        )
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--cifar", type=Path, default=None, help="cifar10_victims128.npz (PRECODE's victims)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    attack_costs(args.clients, args.batch)
    if args.cifar is not None:
        cocktail_party_steps(args.cifar)
    label_counts(args.seeds)


if __name__ == "__main__":
    main()
