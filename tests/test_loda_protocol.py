"""LODA's evaluation protocol (Wan et al., Sec. 5.1): without an adaptive attack, MixUp and InstaHide
rows score the reconstruction against each image's mixing component of largest weight; IG's TV weight
is 1e-3 against gradient pruning and 1e-4 otherwise."""

from __future__ import annotations

import pytest
import torch
import yaml

from leakshield.attacks import create_attack
from leakshield.data import load_dataset
from leakshield.defenses import create_defense
from leakshield.experiment import ExperimentRunner, ResultStore, parse_config

from helpers import CONFIGS, client_context, tiny_config

CPU = torch.device("cpu")


def test_mixup_records_each_images_component_of_largest_weight():
    digits = load_dataset("digits", {"channels": 1, "size": 16})
    batch = digits.public.subset(list(range(8)))
    for name in ("mixup", "instahide"):
        extra = {"k_private": 2, "sign_flip": False} if name == "instahide" else {}
        defense = create_defense(name, {"k": 2, "alpha": [1.0, 1.0], "max_coefficient": 1.0, **extra})
        context = client_context(3, data=batch, info=digits.info, public=digits.public, batch=batch)
        mixed, _ = defense.data_hook(batch.x, batch.y, context)
        largest = context.notes["largest_component"]
        assert largest.shape == batch.x.shape
        own = (largest == batch.x).flatten(1).all(1)
        assert 0 < int(own.sum()) < len(batch)  # sometimes the image itself, sometimes its partner
        # a two-image mix λ·a + (1 − λ)·b lies nearer its larger-weight component: the note is that one
        to_note = (mixed - largest).flatten(1).norm(dim=1)
        to_own = (mixed - batch.x).flatten(1).norm(dim=1)
        assert bool((to_note <= to_own + 1e-6).all()) and bool((to_note[~own] < to_own[~own]).all())


def test_a_mixup_cell_scores_against_the_largest_component(tmp_path):
    cfg = parse_config(
        tiny_config(
            defenses=["none", {"name": "mixup", "k": 4}],
            attacks=[{"name": "ig", "iterations": 5}],
            victims={"count": 2, "batch_size": 1, "seed": 0},
        )
    )
    out = tmp_path / "run"
    assert ExperimentRunner(cfg, out, device="cpu", progress=False).run().failed == 0
    records = {r.defense: r for r in ResultStore(out / "results.sqlite").records() if r.kind == "attack"}
    mixed = records["mixup"].metrics
    assert {"psnr_component", "ssim_component", "asr_component"} <= set(mixed)
    assert mixed["psnr_component"] != mixed["psnr"] or mixed["ssim_component"] != mixed["ssim"]
    assert "psnr_component" not in records["none"].metrics


@pytest.mark.parametrize("name", ["loda.yaml", "loda-cpu.yaml"])
def test_the_loda_config_sets_igs_tv_as_the_paper_does(name):
    config = yaml.safe_load((CONFIGS / name).read_text())
    pruning = {d["label"] for d in config["defenses"] if isinstance(d, dict) and d["name"] == "pruning"}
    labels = {d if isinstance(d, str) else d.get("label", d["name"]) for d in config["defenses"]}
    igs = [a for a in config["attacks"] if a["name"] == "ig"]
    for attack in igs:
        tv = attack.get("tv", 1e-4)
        assert tv == (1e-3 if set(attack["against"]) <= pruning else 1e-4)
    assert set().union(*(set(a["against"]) for a in igs)) == labels  # every row is attacked by one IG
    assert "psnr_component" in config["report"]["values"]


def test_the_private_image_meets_the_kkt_conditions_that_eq6_forces_into_equalities(tmp_path):
    # x′ sits on the box bound at 95 % of its pixels (16 px digits, c 20, 500 steps of τ 0.1), where Eq. 4's
    # first-order condition is an inequality. Measured for seeds 0–2 at the encoder's c: Eq. 6's residual
    # at the private image 1.59e5, larger than at a grey image (1.10e5–1.13e5); the bound-aware residual
    # at the private image 1.3e3–2.2e3, below the grey image's 2.4e3–2.7e3 (the smallest gap 18 %). Solved
    # from grey (100 Adam steps of 0.01), Eq. 6 lands at MSE 0.37 to the private image (toward x′), the
    # bound-aware form at 0.13.
    from leakshield.artifacts import ArtifactCache
    from leakshield.attacks.adaptive.loda import solve_stationarity
    from leakshield.defenses.loda.encoder import obscure, stationarity_residual
    from leakshield.defenses.loda.extractor import ExtractorParams, feature_map, fitted_extractor

    digits = load_dataset("digits", {"size": 16})
    net = fitted_extractor(
        ExtractorParams(epochs=10), digits.info, digits.public, 0, ArtifactCache(tmp_path), CPU
    )
    g = feature_map(net, ExtractorParams())
    pick = torch.randperm(len(digits.train), generator=torch.Generator().manual_seed(0))[:8]
    start = torch.randperm(len(digits.public), generator=torch.Generator().manual_seed(100))[:8]
    private = digits.train.x[pick]
    x_prime = obscure(g, private, digits.public.x[start], digits.info, c=20.0, steps=500, lr=0.1)
    assert float(((x_prime <= 1e-6) | (x_prime >= 1 - 1e-6)).float().mean()) > 0.8
    grey = torch.full_like(x_prime, 0.5)

    def residual(x: torch.Tensor, kkt: bool) -> float:
        return float(stationarity_residual(g, x_prime, x, digits.info, 20.0, kkt=kkt).sum().detach())

    assert residual(private, kkt=False) > residual(grey, kkt=False)  # Eq. 6 prefers grey to the truth
    assert residual(private, kkt=True) < 0.05 * residual(private, kkt=False)
    assert residual(private, kkt=True) < residual(grey, kkt=True)  # the KKT form prefers the truth
    mse = {}
    for kkt in (False, True):
        found, _ = solve_stationarity(g, x_prime, grey, digits.info, c=20.0, steps=100, lr=0.01, kkt=kkt)
        mse[kkt] = float(((found - private) ** 2).mean())
    assert mse[True] < mse[False] - 0.1
    assert (
        create_attack("loda-inverse-kkt").params.kkt
        and create_attack("loda-inverse-kkt").params.inverse_c is None
    )


def test_loda_can_start_from_another_datasets_files(tmp_path):
    # the paper starts CIFAR-10 clients' x′ from CIFAR-100 training images: here CIFAR-100's binary files
    import numpy as np
    import pytest

    from leakshield.artifacts import FitData
    from leakshield.errors import ConfigError

    from helpers import cifar_records

    rng = np.random.default_rng(0)
    (tmp_path / "train.bin").write_bytes(cifar_records(12, 2, rng)[0])
    (tmp_path / "test.bin").write_bytes(cifar_records(3, 2, rng)[0])
    digits = load_dataset("digits", {"channels": 3, "size": 16})
    client = digits.train.subset(list(range(6)))
    pool = load_dataset(
        "cifar100", {"channels": 3, "size": 16, "public_fraction": 0.0}, root=tmp_path
    ).train.x
    nearest = {}
    for starts in ("cifar100", None):
        extra = {"start_dataset": starts, "start_root": str(tmp_path)} if starts else {}
        defense = create_defense("loda1", {"steps": 1, "epochs": 1, **extra})
        fit = FitData(digits.info, client, None, 0, CPU, False, None, digits.public)
        obscured = defense.fit(fit).tensors["obscured"]
        distance = ((obscured[:, None] - pool[None]) ** 2).flatten(2).sum(-1).sqrt().min(dim=1).values
        nearest[starts] = float(distance.max())
    assert nearest["cifar100"] <= 0.1 + 1e-5  # one normalized step of τ 0.1 from a CIFAR-100 image
    assert nearest[None] > 1.0  # from the public digits instead
    with pytest.raises(ConfigError, match="registered dataset"):
        create_defense("loda", {"start_dataset": "cifar1000"})


def test_c_is_calibrated_per_extractor_by_the_papers_criterion(tmp_path):
    # The default extractor (tanh LeNet, 30 epochs), 32 px digits, 500 steps (measured): mean SSIM of x′ to
    # x* for c 1, 2, 5, 10, 20: LODA1 1.00, 0.85, 0.30, 0.12, 0.045 (feature error 0.01 → 0.74); LODA2
    # 1.00, 0.99, 0.34, 0.16, 0.085: SSIM ≤ 0.1 picks c 20 for both. Here a cheaper extractor and 100 steps.
    from leakshield.artifacts import ArtifactCache, FitData
    from leakshield.defenses.loda.defense import loda_c

    digits = load_dataset("digits", {"channels": 1, "size": 16})
    params = {
        "calibrate_c": True,
        "c": 7.0,  # never used: calibration decides
        "c_grid": [1.0, 5.0, 20.0, 100.0],
        "c_ssim": 0.3,
        "steps": 100,
        "epochs": 2,
    }
    defense = create_defense("loda1", params)
    cache = ArtifactCache(tmp_path / "cache")
    client = digits.train.subset(list(range(4)))
    artifact = defense.fit(FitData(digits.info, client, None, 0, CPU, False, cache, digits.public))
    chosen = artifact.metadata["c"]
    from leakshield.defenses.loda.calibration import calibrated_c

    p = defense.params
    _, trials = calibrated_c(
        p, list(p.c_grid), p.c_ssim, p.steps, p.step_size, digits.info, digits.public, 0, cache, CPU
    )
    assert [t.c for t in trials][-1] == chosen and trials[-1].ssim <= 0.3
    assert all(t.ssim > 0.3 for t in trials[:-1]) and chosen > 1.0  # the smallest c far enough
    assert trials[0].feature_error < trials[-1].feature_error  # closer features for smaller c
    # the attacker, with only the public split and no cache, computes the same c
    assert loda_c(p, digits.info, digits.public, 0, None, CPU) == chosen
    assert loda_c(create_defense("loda1", {}).params, digits.info, digits.public, 0, None, CPU) == 20.0
