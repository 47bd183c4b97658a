"""SEER (Garov et al., ICLR 2024): a model trained with a secret decoder so that a securely aggregated
gradient decodes to the one sample with the property; unit tests of its steps and the paper's claim on
real digits at a size that fits in seconds."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from leakshield.artifacts import FitData
from leakshield.attacks import create_attack
from leakshield.attacks.active.seer import SeerSecrets
from leakshield.attacks.active.seer_training import (
    Disaggregator,
    property_scores,
    property_threshold,
    scaled_to_mean,
    shifted,
    tweak_batch,
)
from leakshield.cli import main
from leakshield.data import ImageSet, load_dataset
from leakshield.defenses import DefensePipeline
from leakshield.errors import ConfigError
from leakshield.experiment import ResultStore
from leakshield.fl import HonestClient, LocalTraining, ServerKnowledge, ThreatModel
from leakshield.fl.secure_aggregation import AggregateMember, observe_aggregate
from leakshield.metrics.image import ssim
from leakshield.models import create_model

from helpers import tiny_config, write_config

CLIENTS, BATCH = 4, 4  # an aggregate of 16 samples from 4 clients


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", {"channels": 1, "size": 16})


def small_mlp(digits):
    return create_model("mlp", {"width": 64, "hidden_layers": 1}, in_shape=digits.info.shape, num_classes=10,
                        seed=0)  # fmt: skip


@pytest.fixture(scope="module")
def fitted(digits):
    """SEER fitted for aggregates of 16 on a width-64 MLP (≈ 15 s on 2 cores)."""
    attack = create_attack("seer", {"steps": 5000, "entries": 1024, "aggregate_size": CLIENTS * BATCH})
    artifact = attack.fit(FitData(digits.info, digits.public, small_mlp(digits), 0, torch.device("cpu")))
    return attack.with_artifact(artifact)


def aggregates_with_one_positive(digits, threshold: float, count: int) -> list[ImageSet]:
    """``count`` aggregates of 16 training images (never public ones) in which exactly one image is
    brighter than ``threshold``, the positive first."""
    gen = torch.Generator().manual_seed(0)
    brightness = property_scores(digits.train.x, "bright")
    above = (brightness > threshold).nonzero().flatten()
    below = (brightness <= threshold).nonzero().flatten()
    out = []
    for _ in range(count):
        positive = above[torch.randint(len(above), (1,), generator=gen)]
        rest = below[torch.randperm(len(below), generator=gen)[: CLIENTS * BATCH - 1]]
        out.append(digits.train.subset(torch.cat([positive, rest]).tolist()))
    return out


def observe(digits, attack, model, images: ImageSet, seed: int = 0):
    """The server's view of the securely aggregated FedSGD round of 4 clients holding ``images``."""
    parts = []
    for c in range(CLIENTS):
        data = images.subset(list(range(c * BATCH, (c + 1) * BATCH)))
        client = HonestClient(c, data, LocalTraining(), DefensePipeline(), digits.info)
        parts.append(AggregateMember(client, data))
    gens = [[torch.Generator().manual_seed(seed + i) for i in range(CLIENTS)]]
    knowledge = ServerKnowledge(digits.info, digits.public)
    return observe_aggregate([model], parts, 0, threat=ThreatModel(), rounds=[0], server=attack,
                             knowledge=knowledge, generators=gens).views[0]  # fmt: skip


# -- steps --------------------------------------------------------------------------------------------
def test_scaled_to_mean_reaches_the_target_brightness(digits):
    images = digits.public.x[:8]
    targets = torch.linspace(0.05, 0.5, 8)
    means = scaled_to_mean(images, targets).flatten(1).mean(dim=1)
    assert torch.allclose(means, targets, atol=1e-4)
    assert scaled_to_mean(images, targets).max() <= 1 and scaled_to_mean(images, targets).min() >= 0


@pytest.mark.parametrize("prop", ["bright", "dark"])
def test_tweaked_batches_hold_exactly_one_sample_with_the_property(digits, prop):
    threshold = property_threshold(digits.public, prop, 16)
    gen = torch.Generator().manual_seed(0)
    for start in range(0, 160, 16):
        scores = property_scores(tweak_batch(digits.public.x[start : start + 16], threshold, prop, gen), prop)
        assert scores[0] > threshold and (scores[1:] <= threshold).all()


def test_the_augmentation_moves_each_image_by_at_most_its_shift(digits):
    images = digits.public.x[:32]
    gen = torch.Generator().manual_seed(0)
    moved = shifted(images, 1, gen)
    assert torch.equal(shifted(images, 0, gen), images)
    assert torch.allclose(moved.sum(dim=(1, 2, 3)), images.sum(dim=(1, 2, 3)))  # rolled, not cropped
    rolls = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1)]
    for x, y in zip(images, moved, strict=True):
        assert any(torch.equal(torch.roll(x, shifts=r, dims=(1, 2)), y) for r in rolls)
    assert not torch.equal(moved, images)


def test_the_threshold_leaves_one_public_sample_in_an_aggregate_above_it(digits):
    threshold = property_threshold(digits.public, "bright", 16)
    share = (property_scores(digits.public.x, "bright") > threshold).float().mean()
    assert share == pytest.approx(1 / 16, abs=0.01)  # 16 of 288: ties of quantized brightness


def test_the_disaggregator_is_linear_so_an_aggregate_decodes_the_sum_of_its_codes():
    torch.manual_seed(0)
    decoder = Disaggregator(torch.tensor([0, 3, 5]), latent=4, hidden=8, shape=(1, 2, 2))
    a, b = torch.randn(7), torch.randn(7)
    code = decoder.disaggregate
    assert torch.allclose(code((a + b)[decoder.entries]), code(a[decoder.entries]) + code(b[decoder.entries]),
                          atol=1e-6)  # fmt: skip
    assert decoder(a).shape == (1, 1, 2, 2)


def test_seer_refuses_before_it_is_fitted(digits):
    with pytest.raises(ConfigError, match="not been fitted"):
        create_attack("seer").prepare_model(small_mlp(digits), ServerKnowledge(digits.info, digits.public))
    # a shift in pixels is checked against the image it moves (16 px here: at most 8)
    data = FitData(digits.info, digits.public, small_mlp(digits), 0, torch.device("cpu"))
    with pytest.raises(ConfigError, match="shift 9 px is more than half the 16-px image side; use at most 8"):
        create_attack("seer", {"shift": 9}).fit(data)


def test_the_model_sent_keeps_the_honest_architecture(digits, fitted):
    honest = small_mlp(digits)
    prepared = fitted.prepare_model(honest, ServerKnowledge(digits.info, digits.public))
    assert isinstance(prepared.secrets, SeerSecrets)
    sent = dict(prepared.model.named_parameters())
    assert {k: v.shape for k, v in sent.items()} == {k: v.shape for k, v in honest.named_parameters()}
    assert any(not torch.equal(v, sent[k]) for k, v in honest.named_parameters())  # trained, not honest


# -- the paper's claim ----------------------------------------------------------------------------------
def test_seer_recovers_the_bright_sample_from_a_secure_aggregate(digits, fitted):
    """The paper's secure-aggregation setting: from the sum of 4 clients' updates, the one sample above the
    property's threshold decodes recognizably; the same decoder on the honest model's aggregate gives
    far less (its decoder's prior of a bright digit). Measured (20 aggregates of private training
    images): SEER's SSIM to the positive ≥ 0.6 in 12/20, mean 0.69; the honest model's 3/20, mean
    0.35 (with one thread: the same counts)."""
    threshold = fitted.artifact.metadata["threshold"]
    scores, honest_scores = [], []
    model = small_mlp(digits)
    secrets = fitted.prepare_model(model, ServerKnowledge(digits.info, digits.public)).secrets
    for k, images in enumerate(aggregates_with_one_positive(digits, threshold, 20)):
        view = observe(digits, fitted, model, images, seed=k)
        assert view.clients == CLIENTS and view.batch_size == CLIENTS * BATCH
        found = fitted.reconstruct(view)
        assert found.images.shape == (16, *digits.info.shape)
        scores.append(ssim(found.images[:1], images.x[:1]).item())
        honest = observe(digits, create_attack("ig"), model, images, seed=k)  # an unchanged model
        honest = dataclasses.replace(honest, secrets=secrets)
        honest_scores.append(ssim(fitted.reconstruct(honest).images[:1], images.x[:1]).item())
    scores_t = torch.tensor(scores)
    honest_t = torch.tensor(honest_scores)
    assert (scores_t >= 0.6).sum() >= 9, scores
    assert (honest_t >= 0.6).sum() <= 6, honest_scores
    assert scores_t.mean() > honest_t.mean() + 0.2, (scores, honest_scores)


# -- in a grid ------------------------------------------------------------------------------------------
def test_seer_runs_in_a_grid_with_a_fit_per_model_layout_and_a_dry_run_that_times_it(tmp_path, capsys):
    """Through ``leakshield run``: the dry run times SEER's fit once per model layout (PRECODE's
    bottleneck changes it) without fitting into the run's cache, and every cell then runs with the fit
    of its own layout."""
    seer = {"name": "seer", "steps": 40, "entries": 64, "latent": 8, "hidden": 16, "aggregate_size": 4}
    fl = {"clients": 4, "secure_aggregation": True, "local": {"algorithm": "fedsgd", "batch_size": 2}}
    config = tiny_config(models=[{"name": "mlp", "width": 16, "hidden_layers": 1}],
                         defenses=["none", "precode"], attacks=[seer], fl=fl,
                         victims={"count": 1, "batch_size": 2, "seed": 0}, utility={"rounds": 0})  # fmt: skip
    path, out = write_config(tmp_path / "cfg.yaml", config), tmp_path / "run"
    args = [
        "--quiet",
        "--device",
        "cpu",
        "--threads",
        "1",
        "--no-report",
        "--cache-dir",
        str(tmp_path / "cache"),
    ]
    assert main(["run", str(path), "--out", str(out), *args, "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert text.count("fit seer · mlp") == 2 and "not estimated" not in text, text
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.safetensors"))
    assert main(["run", str(path), "--out", str(out), *args]) == 0
    records = [r for r in ResultStore(out / "results.sqlite").records() if r.kind == "attack"]
    assert len(records) == 2 and all(r.status == "ok" for r in records), [r.error for r in records]
    capsys.readouterr()
    # the two fits are in the cache now: a dry run of the same grid elsewhere counts neither
    assert main(["run", str(path), "--out", str(tmp_path / "again"), *args, "--dry-run"]) == 0
    assert "fit seer" not in capsys.readouterr().out
    # two seeds fit twice per layout (the key holds the seed); a fresh cache counts both
    seeds = write_config(tmp_path / "seeds.yaml", {**config, "seeds": [0, 1]})
    fresh = [a if a != str(tmp_path / "cache") else str(tmp_path / "cache2") for a in args]
    assert main(["run", str(seeds), "--out", str(tmp_path / "seeds"), *fresh, "--dry-run"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "fit seer · mlp" in line]
    assert len(lines) == 2 and all(" 2 × " in line for line in lines), lines
