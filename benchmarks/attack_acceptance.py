"""Full-size measurements of the attack suite (the figures quoted in the attack-suite issue's note).

Embedded digits at 32×32×3 and the real CIFAR-10 victims of ../shared/data, untrained models, labels
known unless stated. Sections print as they finish; ``--only`` runs some of them. The default test run
has reduced versions of the same checks.

    python benchmarks/attack_acceptance.py [--only labels analytic imprint lenet lenet-default fedavg dlg
                                            convnet precode convnet4800]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from leakshield.attacks import ServerKnowledge, create_attack, infer_labels, label_accuracy
from leakshield.data import DatasetInfo, ImageSet, load_dataset
from leakshield.fl import LocalTraining, server_view_of
from leakshield.metrics import match_reconstructions, psnr, ssim
from leakshield.models import create_model

SHARED = Path(
    os.environ.get("LEAKSHIELD_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")
)
CIFAR = DatasetInfo("cifar10", (3, 32, 32), 10, (0.4915, 0.4823, 0.4468), (0.2470, 0.2435, 0.2616))
DIGITS = load_dataset("digits", {"channels": 3, "size": 32})
VICTIMS = torch.randperm(len(DIGITS.train), generator=torch.Generator().manual_seed(0))[:8].tolist()


def views(model, batches, info, *, local=None, labels_known=True):
    return [server_view_of(model, b, info, local=local, labels_known=labels_known) for b in batches]


def scores(reconstructions, batches):
    ps, ss = [], []
    for rec, batch in zip(reconstructions, batches, strict=True):
        matched = rec.images[match_reconstructions(rec.images, batch.x)]
        ps += psnr(matched, batch.x).tolist()
        ss += ssim(matched, batch.x).tolist()
    return ps, ss


def summary(name, ps, ss, seconds):
    print(
        f"  {name:<34} PSNR {statistics.fmean(ps):6.2f} dB  SSIM {statistics.fmean(ss):.3f}  "
        f"(min SSIM {min(ss):.3f}, {seconds:.0f} s)",
        flush=True,
    )


def baseline():
    mean = DIGITS.public.x.mean(0, keepdim=True)
    truth = DIGITS.train.x[VICTIMS]
    ps, ss = psnr(mean.expand_as(truth), truth).tolist(), ssim(mean.expand_as(truth), truth).tolist()
    summary("no-information baseline (digits)", ps, ss, 0)
    return statistics.fmean(ss)


def section_labels():
    print("label inference (untrained LeNet)", flush=True)
    model = create_model("lenet", in_shape=DIGITS.info.shape, num_classes=10)
    singles = [DIGITS.train.subset([i]) for i in range(50)]
    hits = sum(
        int(infer_labels(v.update.delta["classifier.weight"], 1)) == int(b.y[0])
        for v, b in zip(views(model, singles, DIGITS.info), singles, strict=True)
    )
    print(f"  iDLG rule, 50 single images: {hits}/50", flush=True)
    gen = torch.Generator().manual_seed(1)
    batches = [DIGITS.train.subset(torch.randperm(len(DIGITS.train), generator=gen)[:8]) for _ in range(50)]
    accs = [
        label_accuracy(infer_labels(v.update.delta["classifier.weight"], 8), b.y)
        for v, b in zip(views(model, batches, DIGITS.info), batches, strict=True)
    ]
    print(f"  batch rule, 50 batches of 8: mean label accuracy {statistics.fmean(accs):.3f}", flush=True)


def section_analytic():
    print("analytic FC attack (untrained DMLP, batch 1)", flush=True)
    model = create_model("dmlp", in_shape=DIGITS.info.shape, num_classes=10)
    batches = [DIGITS.train.subset([i]) for i in VICTIMS]
    start = time.perf_counter()
    recs = create_attack("analytic").reconstruct_many(views(model, batches, DIGITS.info), seeds=range(8))
    summary("analytic, 8 victims", *scores(recs, batches), time.perf_counter() - start)


def section_imprint():
    print("imprint, 64 bins, batches of 16 (untrained LeNet behind the block)", flush=True)
    attack = create_attack("imprint", {"bins": 64})
    model = attack.prepare_model(
        create_model("lenet", in_shape=DIGITS.info.shape, num_classes=10),
        ServerKnowledge(DIGITS.info, DIGITS.public),
    ).model
    gen = torch.Generator().manual_seed(2)
    for trial in range(5):
        batch = DIGITS.train.subset(torch.randperm(len(DIGITS.train), generator=gen)[:16])
        rec = attack.reconstruct(views(model, [batch], DIGITS.info)[0])
        ps, _ = scores([rec], [batch])
        print(f"  batch {trial}: {sum(p >= 30 for p in ps)}/16 images with PSNR ≥ 30 dB", flush=True)


def section_lenet(budgets, init_range=0.5):
    init = "uniform ±0.5 init" if init_range else "PyTorch's default init"
    print(f"LeNet (sigmoid, {init}), 8 victims, labels known: IG (cosine) vs ATS's Adam + L2", flush=True)
    model = create_model("lenet", {"init_range": init_range}, in_shape=DIGITS.info.shape, num_classes=10)
    batches = [DIGITS.train.subset([i]) for i in VICTIMS]
    vs = views(model, batches, DIGITS.info)
    for preset in ("ig", "adam-l2"):
        for budget in budgets:
            start = time.perf_counter()
            recs = create_attack(preset, {"iterations": budget}).reconstruct_many(vs, seeds=range(8))
            summary(f"{preset} at {budget}", *scores(recs, batches), time.perf_counter() - start)


def section_fedavg():
    print(
        "IG-1000 on LeNet: FedAvg (2 local steps of batch 2, lr 0.01, in order) vs FedSGD, 4 images "
        "per victim",
        flush=True,
    )
    model = create_model("lenet", in_shape=DIGITS.info.shape, num_classes=10)
    gen = torch.Generator().manual_seed(3)
    batches = [DIGITS.train.subset(torch.randperm(len(DIGITS.train), generator=gen)[:4]) for _ in range(8)]
    local = LocalTraining(algorithm="fedavg", local_lr=0.01, batch_size=2, shuffle=False)
    for name, lt in (("FedSGD", LocalTraining()), ("FedAvg", local)):
        start = time.perf_counter()
        recs = create_attack("ig", {"iterations": 1000}).reconstruct_many(
            views(model, batches, DIGITS.info, local=lt), seeds=range(8)
        )
        summary(name, *scores(recs, batches), time.perf_counter() - start)


def section_dlg():
    print("DLG (labels optimized jointly) and iDLG (inferred) on LeNet, 8 victims, no restarts", flush=True)
    model = create_model("lenet", in_shape=DIGITS.info.shape, num_classes=10)
    batches = [DIGITS.train.subset([i]) for i in VICTIMS]
    for preset in ("dlg", "idlg"):
        vs = views(model, batches, DIGITS.info, labels_known=False)
        start = time.perf_counter()
        recs = create_attack(preset).reconstruct_many(vs, seeds=range(8))
        ps, ss = scores(recs, batches)
        good = sum(p >= 30 and s >= 0.9 for p, s in zip(ps, ss, strict=True))
        labels = sum(int(r.labels[0]) == int(b.y[0]) for r, b in zip(recs, batches, strict=True))
        print(
            f"  {preset}: {good}/8 with PSNR ≥ 30 dB and SSIM ≥ 0.9, labels {labels}/8; per victim "
            + ", ".join(
                f"{p:.1f}/{s:.3f}/{r.stats['seconds']:.0f}s" for p, s, r in zip(ps, ss, recs, strict=True)
            ),
            flush=True,
        )
        summary(preset, ps, ss, time.perf_counter() - start)


def section_convnet(budgets):
    print("IG on the untrained ConvNet (width 16), 8 victims, labels known", flush=True)
    model = create_model("convnet", {"width": 16}, in_shape=DIGITS.info.shape, num_classes=10)
    batches = [DIGITS.train.subset([i]) for i in VICTIMS]
    vs = views(model, batches, DIGITS.info)
    base = baseline()
    for budget in budgets:
        start = time.perf_counter()
        recs = create_attack("ig", {"iterations": budget}).reconstruct_many(vs, seeds=range(8))
        ps, ss = scores(recs, batches)
        summary(f"ig at {budget}", ps, ss, time.perf_counter() - start)
        print(f"    margin over the baseline's SSIM: {statistics.fmean(ss) - base:+.3f}", flush=True)


def section_precode(iterations):
    print(
        f"PRECODE's attack setting on the untrained DMLP, first 8 CIFAR-10 victims ({iterations} steps: "
        "signed Adam lr 0.01, cosine, TV 1e-6, boxed)",
        flush=True,
    )
    with np.load(SHARED / "cifar10_victims128.npz", allow_pickle=False) as npz:
        x = torch.from_numpy(npz["images"][:8]).permute(0, 3, 1, 2).float() / 255
        y = torch.from_numpy(npz["labels"][:8]).long()
    batches = [ImageSet(x[i : i + 1], y[i : i + 1]) for i in range(8)]
    model = create_model("dmlp", in_shape=CIFAR.shape, num_classes=10)
    start = time.perf_counter()
    attack = create_attack("ig", {"iterations": iterations, "lr": 0.01, "tv": 1e-6})
    recs = attack.reconstruct_many(views(model, batches, CIFAR), seeds=range(8))
    ps, ss = scores(recs, batches)
    print("  per victim SSIM: " + ", ".join(f"{s:.3f}" for s in ss), flush=True)
    summary("precode setting", ps, ss, time.perf_counter() - start)


SECTIONS = [
    "labels",
    "analytic",
    "imprint",
    "lenet",
    "lenet-default",
    "fedavg",
    "dlg",
    "convnet",
    "precode",
    "convnet4800",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=SECTIONS, default=SECTIONS)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precode-iterations", type=int, default=2000)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads", flush=True)
    run = {
        "labels": section_labels,
        "analytic": section_analytic,
        "imprint": section_imprint,
        "lenet": lambda: section_lenet([250, 500, 1000, 4800]),
        "lenet-default": lambda: section_lenet([250, 500, 1000, 4800], init_range=None),
        "fedavg": section_fedavg,
        "dlg": section_dlg,
        "convnet": lambda: section_convnet([250, 500, 1000]),
        "precode": lambda: section_precode(args.precode_iterations),
        "convnet4800": lambda: section_convnet([4800]),
    }
    for name in args.only:
        start = time.perf_counter()
        run[name]()
        print(f"[{name}: {time.perf_counter() - start:.0f} s]", flush=True)


if __name__ == "__main__":
    main()
