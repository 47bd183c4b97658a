"""Dataset-condensation baselines (ATS Table 5): DC, DSA, DM and DP-MERF as client-side defenses."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from leakshield.artifacts import Artifact, ArtifactCache, FitData
from leakshield.data import ImageSet, load_dataset
from leakshield.defenses import create_defense
from leakshield.defenses.condensation.augment import GROUPS, siamese_augment
from leakshield.defenses.condensation.dpmerf import FourierFeatures, noise_multiplier, release_epsilon
from leakshield.defenses.condensation.matching import layer_distance
from leakshield.defenses.condensation.synthetic import CondensationNet
from leakshield.errors import ConfigError
from leakshield.metrics.utility import accuracy
from leakshield.models import create_model

from helpers import client_context

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", {"channels": 1, "size": 16})


@pytest.fixture(scope="module")
def client(digits):
    return digits.train.subset(list(range(300)))


def fit(name: str, data: ImageSet, info, cache=None, seed: int = 0, **params) -> Artifact:
    return create_defense(name, params).fit(FitData(info, data, None, seed, CPU, cache=cache))


def test_siamese_augmentation_is_shared_by_seed_and_differentiable():
    x = torch.rand(3, 1, 16, 16, generator=torch.Generator().manual_seed(0))
    for group in GROUPS:
        a = siamese_augment(x, seed=5, groups=(group,))
        assert torch.equal(a, siamese_augment(x, seed=5, groups=(group,))), group
        assert a.shape == x.shape
    # the real and the synthetic batch get the same transform: applied to the same images, equal outputs
    real, syn = x.clone(), x.clone().requires_grad_(True)
    assert torch.equal(siamese_augment(real, 11), siamese_augment(syn, 11).detach())
    siamese_augment(syn, 11, groups=("rotate",)).sum().backward()
    assert syn.grad is not None and syn.grad.abs().sum() > 0
    draws = {siamese_augment(x, s, groups=("crop",)).sum().item() for s in range(6)}
    assert len(draws) > 1


def test_layer_distance_is_dcs_rowwise_cosine_and_ignores_biases():
    g = [torch.randn(4, 3, 3, 3, generator=torch.Generator().manual_seed(1)), torch.randn(4)]
    assert layer_distance(g, g).item() == pytest.approx(0.0, abs=1e-5)
    scaled = [g[0] * 3.0, g[1] * -7.0]  # row scale and biases do not count
    assert layer_distance(scaled, g).item() == pytest.approx(0.0, abs=1e-5)
    flipped = [-g[0], g[1]]
    assert layer_distance(flipped, g).item() == pytest.approx(2.0 * 4, abs=1e-4)


def test_fourier_features_have_unit_norm_and_dp_merf_meets_its_budget():
    phi = FourierFeatures(16, 200, 1.5, torch.Generator().manual_seed(0))
    x = torch.randn(5, 16)
    assert torch.allclose(phi(x).norm(dim=1), torch.ones(5), atol=1e-5)
    for epsilon in (0.5, 1.0, 10.0):
        sigma = noise_multiplier(epsilon, 1e-5)
        assert release_epsilon(sigma, 1e-5) == pytest.approx(epsilon, rel=0.02)
    assert noise_multiplier(0.5, 1e-5) > noise_multiplier(1.0, 1e-5) > noise_multiplier(10.0, 1e-5)


def test_the_gaussian_release_adds_the_noise_its_epsilon_implies():
    """DP-MERF's release (Sec. 3): μ̃ − μ is N(0, (σ·Δ)²) for the σ that meets (ε, δ); on 100,000
    entries the measured multiplier is within 1 % of σ (its sd is 0.22 %)."""
    from leakshield.defenses.condensation.dpmerf import gaussian_release

    sigma = noise_multiplier(1.0, 1e-5)
    clean = torch.rand(1000, 100) / 50
    noisy, applied = gaussian_release(clean, 2 / 500, sigma, torch.Generator().manual_seed(0))
    assert applied == pytest.approx(sigma, rel=0.01)
    assert ((noisy - clean) / (2 / 500)).std().item() == pytest.approx(sigma, rel=0.01)
    assert ((noisy - clean).mean() / (noisy - clean).std()).abs() < 0.02  # zero-mean noise
    assert release_epsilon(applied, 1e-5) == pytest.approx(1.0, rel=0.03)


@pytest.mark.parametrize("name", ["dc", "dsa", "dm", "dp-merf"])
def test_each_method_gives_ipc_images_per_class_in_the_pixel_range(name, digits, client):
    params = {"ipc": 3, "iterations": 2, "width": 8, "outer_loop": 2, "inner_loop": 1}
    if name == "dm":
        params = {"ipc": 3, "iterations": 2, "width": 8}
    if name == "dp-merf":
        params = {"ipc": 3, "steps": 5, "features": 100}
    artifact = fit(name, client, digits.info, **params)
    x, y = artifact.tensors["x"], artifact.tensors["y"]
    assert x.shape == (30, *digits.info.shape) and torch.equal(y.bincount(), torch.full((10,), 3))
    assert x.min() >= 0 and x.max() <= 1
    if name == "dp-merf":  # ε of the σ the accountant gave, and that σ is what the release added
        meta = artifact.metadata
        assert meta["epsilon"] == pytest.approx(1.0, rel=0.02)
        assert meta["sigma_applied"] == pytest.approx(meta["sigma"], rel=0.15)  # 1,000 entries: sd 2.2 %


def test_dsa_matches_siamese_augmented_views_and_dc_plain_ones(digits, client):
    """DSA (Zhao & Bilen, ICML 2021): the real and the synthetic batch of a step see the same
    augmentation draw (one seed), a different draw at another step; DC sees the normalized images."""
    from leakshield.defenses.condensation import matching

    x = client.x[:4]
    dsa = matching.MatchingSetup(digits.info, 8, 2, 16, True, seed=0)
    dc = matching.MatchingSetup(digits.info, 8, 2, 16, False, seed=0)
    assert torch.equal(dc.view(x, 3, 1), digits.info.normalize(x))
    assert not torch.allclose(dsa.view(x, 3, 1), digits.info.normalize(x))
    assert torch.equal(dsa.view(x, 3, 1), dsa.view(x, 3, 1))  # the same draw for the same step
    assert not torch.equal(dsa.view(x, 3, 1), dsa.view(x, 4, 1))


@pytest.mark.parametrize("method", ["dc", "dsa", "dm"])
def test_condensation_descends_its_matching_loss_on_networks_it_never_saw(method, digits, client):
    """The papers' core step: the synthetic images move down the matching loss (DC/DSA: gradient
    distance, Eq. 10; DM: mean-embedding distance, Eq. 4), and the decrease holds on fresh networks not
    used in training (4 for DC/DSA, 16 for DM). Measured over seeds 0–2 (ConvNet-2 of width 8, 2 images
    per class from real ones): after/before = 0.69–0.89 (DC, 10 iterations), 0.62–0.76 (DSA), 0.14–0.25
    (DM, 50 iterations at lr 0.1); with the image step reversed 4.0–5.9 (DC/DSA) and 15–26 (DM). At DM's
    lr 1 (the paper's, for 128-wide networks) this tiny network's loss did not fall (0.84–1.73)."""
    from leakshield.defenses.condensation import matching
    from leakshield.defenses.condensation.synthetic import real_start

    setup = matching.MatchingSetup(digits.info, 8, 2, 16, method == "dsa", seed=0)
    syn = matching.SyntheticSet.start(real_start(client, 2, torch.Generator().manual_seed(0)))

    def iteration(s: matching.SyntheticSet, it: int, lr: float) -> float:
        if method == "dm":
            return matching.distribution_matching_iteration(setup, client, s, it, lr_images=lr)
        return matching.gradient_matching_iteration(
            setup, client, s, it, outer=2 if lr else 1, inner=1, lr_images=lr, lr_net=0.01, batch_train=32
        )

    def held_out_loss() -> float:  # the loss before a (zero) step, on networks 10,000…
        probes = range(10_000, 10_016 if method == "dm" else 10_004)
        return sum(iteration(matching.SyntheticSet.start(ImageSet(syn.x, syn.y)), it, 0.0) for it in probes)

    before = held_out_loss()
    for it in range(50 if method == "dm" else 10):
        iteration(syn, it, 0.1)
    after = held_out_loss()
    assert 0 < after < before, (before, after)  # a distance: positive, and smaller after


def test_a_class_with_fewer_images_than_ipc_keeps_its_count(digits):
    few = digits.train.subset([i for i in range(200) if int(digits.train.y[i]) in (0, 1)][:7])
    artifact = fit("dm", few, digits.info, ipc=50, iterations=1, width=8)
    assert len(artifact.tensors["x"]) == len(few)
    assert set(artifact.tensors["y"].tolist()) <= {0, 1}


def test_condensation_resumes_from_its_checkpoints_bit_identically(digits, client, tmp_path, monkeypatch):
    params = {"ipc": 2, "iterations": 6, "width": 8, "checkpoint_every": 3}
    whole = fit("dm", client, digits.info, ArtifactCache(tmp_path / "a"), **params)
    cache = ArtifactCache(tmp_path / "b")
    fit("dm", client, digits.info, cache, **{**params, "iterations": 3})  # a run stopped after 3
    import leakshield.defenses.condensation.defense as module

    ran = []
    original = module.distribution_matching_iteration

    def counted(*args, **kwargs):
        ran.append(args[3])
        return original(*args, **kwargs)

    monkeypatch.setattr(module, "distribution_matching_iteration", counted)
    resumed = fit("dm", client, digits.info, cache, **params)
    assert ran == [3, 4, 5]
    assert torch.equal(whole.tensors["x"], resumed.tensors["x"])
    ran.clear()
    again = fit("dm", client, digits.info, cache, **params)  # finished: nothing runs again
    assert ran == [] and torch.equal(again.tensors["x"], whole.tensors["x"])


def test_the_data_stage_trains_on_synthetic_images_of_each_images_class(digits, client):
    artifact = fit("dm", client, digits.info, ipc=2, iterations=1, width=8)
    defense = create_defense("dm", {"ipc": 2, "iterations": 1, "width": 8})
    batch = client.subset(list(range(16)))
    ctx = dataclasses.replace(client_context(data=client, info=digits.info), artifact=artifact)
    x, y = defense.data_hook(batch.x, batch.y, ctx)
    assert torch.equal(y, batch.y)
    synthetic = artifact.tensors["x"]
    for image, label in zip(x, y, strict=True):
        rows = (artifact.tensors["y"] == label).nonzero().flatten()
        assert any(torch.equal(image, synthetic[r]) for r in rows)
    partial = Artifact({"x": synthetic[:2], "y": torch.tensor([0, 0])})
    with pytest.raises(ValueError, match="class 9"):
        defense.data_hook(batch.x[:1], torch.tensor([9]), dataclasses.replace(ctx, artifact=partial))


def test_distribution_matching_turns_noise_into_a_training_set(digits):
    """DM's mechanism (Zhao & Bilen, Sec. 3): matching mean embeddings under random networks alone moves
    class information into the synthetic images. One image per class started from uniform noise, 100
    iterations; a ConvNet-3 (width 32) trained 100 steps on the 10 images. Measured over seeds 0–2: test
    accuracy 0.02–0.18 from the noise start, 0.62–0.69 after DM."""
    info = digits.info
    start = fit("dm", digits.train, info, ipc=1, iterations=1, width=32, init="noise", lr_images=1e-9)
    condensed = fit("dm", digits.train, info, ipc=1, iterations=100, width=32, init="noise")
    before, after = (_train_and_test(a.tensors["x"], a.tensors["y"], digits, 0) for a in (start, condensed))
    assert before < 0.3 and after > 0.45, (before, after)


def _train_and_test(x: torch.Tensor, y: torch.Tensor, digits, seed: int) -> float:
    torch.manual_seed(seed)
    net = CondensationNet(digits.info, 32, 3)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    xs = digits.info.normalize(x)
    for _ in range(100):
        opt.zero_grad()
        F.cross_entropy(net(xs), y).backward()
        opt.step()
    with torch.no_grad():
        predicted = net(digits.info.normalize(digits.test.x)).argmax(1)
    return float((predicted == digits.test.y).float().mean())


def test_params_name_the_field():
    with pytest.raises(ConfigError, match="ipc"):
        create_defense("dc", {"ipc": 0})
    with pytest.raises(ConfigError, match="epsilon"):
        create_defense("dp-merf", {"epsilon": -1})


def test_gs_wgan_sanitizes_each_generated_images_gradient():
    from leakshield.defenses.condensation.gswgan import SanitizedGradient

    x = torch.zeros(3, 1, 2, 2, requires_grad=True)
    weights = torch.tensor([10.0, 0.1, 0.0]).view(3, 1, 1, 1)
    no_noise = torch.zeros(3, 1, 2, 2)
    (SanitizedGradient.apply(x, 1.0, 1.07, no_noise) * weights).sum().backward()
    norms = x.grad.flatten(1).norm(dim=1)
    assert norms.tolist() == pytest.approx([1.0, 0.2, 0.0], abs=1e-6)  # clipped to C = 1, small ones kept
    x.grad = None
    noise = torch.ones(3, 1, 2, 2)
    (SanitizedGradient.apply(x, 2.0, 0.5, noise) * 0).sum().backward()
    assert torch.allclose(x.grad, torch.ones_like(x) * 0.5 * 2.0)  # N(0, (σC)²) per sample


def test_gs_wgan_takes_as_many_steps_as_its_budget_allows():
    from leakshield.defenses.condensation.defense import GSWGANParams
    from leakshield.defenses.condensation.gswgan import subsampled_epsilon

    p = GSWGANParams(target_epsilon=4.0, shards=50)
    steps = p.steps()
    assert (
        subsampled_epsilon(p.sigma, 1 / 50, steps, p.delta)
        <= 4.0
        < subsampled_epsilon(p.sigma, 1 / 50, steps + 1, p.delta)
    )
    capped = GSWGANParams(target_epsilon=4.0, shards=50, max_steps=100)
    assert capped.steps() == 100 and capped.epsilon() < 4.0


def test_gs_wgan_fits_and_reports_its_epsilon(digits, client):
    params = {"ipc": 2, "shards": 5, "pretrain_steps": 1, "max_steps": 3, "width": 8, "critic_widths": [8]}
    artifact = fit("gs-wgan", client, digits.info, **params)
    assert artifact.tensors["x"].shape == (20, *digits.info.shape)
    defense = create_defense("gs-wgan", params)
    assert defense.privacy_spent({})["epsilon"] == pytest.approx(artifact.metadata["epsilon"])
    with pytest.raises(ConfigError, match="shards"):
        fit("gs-wgan", client.subset([0, 1, 2]), digits.info, **params)


@pytest.mark.parametrize(
    ("name", "params"),
    [("dc", {"iterations": 20, "outer_loop": 2, "inner_loop": 1}),
     ("dsa", {"iterations": 20, "outer_loop": 2, "inner_loop": 1}),
     ("dm", {"iterations": 200})],
)  # fmt: skip
def test_condensed_sets_started_from_noise_train_a_model_far_above_chance(name, params, digits, client):
    """The condensation papers' claim at a size that runs in seconds: 3 images per class, grown from noise
    (no real image to start from), train a LeNet (100 SGD steps) to test accuracy far above chance
    (0.1). Over seeds 0–2: DC 0.54–0.59, DSA 0.62–0.75, DM 0.80–0.84; the bar 0.4."""
    artifact = fit(name, client, digits.info, ipc=3, width=8, init="noise", **params)
    x, y = artifact.tensors["x"], artifact.tensors["y"]
    model = create_model("lenet", in_shape=digits.info.shape, num_classes=10, seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(100):
        loss = F.cross_entropy(model(digits.info.normalize(x)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert accuracy(model, digits.test, normalize=digits.info.normalize) > 0.4
