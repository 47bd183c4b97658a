"""Attackers that learn: the learned inverter (Wu et al., UAI 2023) and the diffusion prior that
denoises another attack's images (GUIDE), with the DDPM behind it."""

from __future__ import annotations

import statistics

import pytest
import torch

import leakshield.attacks.learned.attack as attack_module
import leakshield.attacks.learned.guide as guide_module
from leakshield.artifacts import ArtifactCache, FitData
from leakshield.attacks import create_attack
from leakshield.attacks.learned.attack import class_template
from leakshield.attacks.learned.pairs import UpdateSketch, label_block, public_pipeline
from leakshield.data import load_dataset
from leakshield.defenses import DefensePipeline
from leakshield.errors import ConfigError
from leakshield.experiment.probe import probe_attack
from leakshield.fl import ServerKnowledge, server_view_of
from leakshield.generative.diffusion import cosine_alphas_bar, sample, train_denoiser
from leakshield.leaderboard.leak_rate import victim_leaked
from leakshield.metrics import ssim
from leakshield.models import create_model

CPU = torch.device("cpu")
TANH_LENET = {"activation": "tanh", "init_range": None}
TINY = {"pairs": 16, "epochs": 2, "hidden": 8, "sketch_dim": 32}
TINY_DIFFUSION = {"diffusion_steps": 2, "diffusion_width": 4, "diffusion_timesteps": 8}


@pytest.fixture(scope="module")
def digits8():
    return load_dataset("digits", {"channels": 1, "size": 8})


def view_of(attack, digits, rows, defenses=None, model=None, labels_known=True):
    model = (
        model or create_model("mlp", {"width": 16}, in_shape=digits.info.shape, num_classes=10, seed=0).eval()
    )
    return server_view_of(
        model,
        digits.train.subset(rows),
        digits.info,
        defenses=defenses,
        labels_known=labels_known,
        server=attack,
        knowledge=ServerKnowledge(digits.info, digits.public),
    )


# -- the sketch and the pairs ------------------------------------------------------------------------------
def test_the_sketch_is_linear_keeps_small_updates_whole_and_is_fixed_by_its_seed():
    shapes = [("a", torch.Size([30, 20])), ("b", torch.Size([7]))]
    gen = torch.Generator().manual_seed(0)
    u = {"a": torch.randn(30, 20, generator=gen), "b": torch.randn(7, generator=gen)}
    v = {"a": torch.randn(30, 20, generator=gen), "b": torch.randn(7, generator=gen)}
    sketch = UpdateSketch(shapes, 64, seed=3)
    assert sketch(u).shape == (64,)
    total = {k: u[k] + 2 * v[k] for k in u}
    assert torch.allclose(sketch(total), sketch(u) + 2 * sketch(v), atol=1e-5)
    assert torch.equal(UpdateSketch(shapes, 64, seed=3)(u), sketch(u))
    assert not torch.equal(UpdateSketch(shapes, 64, seed=4)(u), sketch(u))
    # entries land in buckets with a sign: the sketch's squared norm is the update's in expectation
    norms = [float(UpdateSketch(shapes, 64, seed=s)(u).square().sum()) for s in range(200)]
    exact = float(sum(t.square().sum() for t in u.values()))
    assert abs(statistics.fmean(norms) / exact - 1) < 0.1
    whole = UpdateSketch(shapes, 10_000, seed=0)
    assert whole.dim == 607 and torch.equal(whole(u), torch.cat([u["a"].reshape(-1), u["b"]]))


def test_the_label_block_is_sorted_one_hot():
    block = label_block(torch.tensor([3, 1]), 4)
    assert block.tolist() == [0, 1, 0, 0, 0, 0, 0, 1]


def test_defenses_that_need_a_fitted_artifact_cannot_be_rebuilt_from_their_public_parameters():
    loda = DefensePipeline.from_config([{"name": "loda"}]).public_config()
    with pytest.raises(ConfigError, match="loda needs a fitted artifact"):
        public_pipeline(loda)
    sized = DefensePipeline.from_config(
        [{"name": "dp-sgd", "params": {"target_epsilon": 8.0, "target_steps": 10}}]
    )
    with pytest.raises(ConfigError, match="dp-sgd sizes its noise from the client's dataset"):
        public_pipeline(sized.public_config())
    noise = public_pipeline(
        DefensePipeline.from_config([{"name": "gaussian-noise", "params": {"sigma": 0.5}}]).public_config()
    )
    assert [(d.name, d.params.sigma) for d in noise.defenses] == [("gaussian-noise", 0.5)]


# -- the learned inverter on tiny inputs ------------------------------------------------------------------
def test_learned_inversion_returns_a_batch_in_the_views_label_order_with_the_class_template_as_reference(
    digits8,
):
    attack = create_attack("learned-inversion", TINY)
    rows = [i for i in range(40) if int(digits8.train.y[i]) in (2, 7)][:2]
    labels = digits8.train.y[rows]
    view = view_of(attack, digits8, rows)
    first, again = attack.reconstruct_many([view, view], seeds=[0, 1])
    assert (
        first.images.shape == (2, 1, 8, 8)
        and float(first.images.min()) >= 0
        and float(first.images.max()) <= 1
    )
    assert torch.equal(first.labels, labels)
    assert torch.equal(first.images, again.images)  # one inverter per model: the same forward pass
    assert first.prior.shape == (2 * 4, 1, 8, 8)  # 4 placebo batches of the victim's labels
    prior = create_attack("learned-inversion", {**TINY, "placebos": 0}).reconstruct(view).prior
    assert torch.allclose(prior, class_template(digits8.public, labels))
    assert first.stats["labels_known"] == 1.0


def test_the_inverter_is_a_fitted_artifact_keyed_by_the_model_it_was_trained_for(
    digits8, tmp_path, monkeypatch
):
    trained = []
    original = attack_module.train_inverter
    monkeypatch.setattr(
        attack_module, "train_inverter", lambda *a, **k: trained.append(1) or original(*a, **k)
    )
    attack = create_attack("learned-inversion", TINY, {"calibration_dir": str(tmp_path)})
    view = view_of(attack, digits8, [0])
    (first,) = attack.reconstruct_many([view], seeds=[0])
    cache = ArtifactCache(tmp_path)
    assert cache.load(attack.inverter_key(view, digits8.public)) is not None
    (again,) = attack.reconstruct_many([view], seeds=[0])
    assert torch.equal(first.images, again.images) and len(trained) == 1  # loaded, not trained again
    other = create_model("mlp", {"width": 16}, in_shape=digits8.info.shape, num_classes=10, seed=1).eval()
    moved = view_of(attack, digits8, [0], model=other)
    assert (
        attack.inverter_key(moved, digits8.public).digest != attack.inverter_key(view, digits8.public).digest
    )
    noisy = view_of(attack, digits8, [0], DefensePipeline.from_config([{"name": "gaussian-noise"}]))
    assert (
        attack.inverter_key(noisy, digits8.public).digest != attack.inverter_key(view, digits8.public).digest
    )


def test_the_inverters_images_return_to_the_victims_label_order():
    """f gives its images in sorted label order; the victim's batch [7, 2] gets them back as [7, 2]."""

    class Sorted(torch.nn.Module):
        def forward(self, features):  # image j holds the value j: its place in the sorted labels
            return torch.arange(2.0).reshape(1, 2, 1, 1, 1).expand(len(features), 2, 1, 2, 2)

    sketch = UpdateSketch([("w", torch.Size([3]))], 3, seed=0)
    images = attack_module.LearnedInversion._inverted(
        Sorted(), sketch, {"w": torch.zeros(3)}, torch.tensor([7, 2]), 10
    )
    assert images[:, 0, 0, 0].tolist() == [1.0, 0.0]


def test_refinement_starts_the_inversion_from_the_inverters_images(digits8):
    attack = create_attack("learned-inversion", {**TINY, "refine": "ig", "refine_steps": 3})
    (rec,) = attack.reconstruct_many([view_of(attack, digits8, [0])], seeds=[0])
    assert rec.images.shape == (1, 1, 8, 8) and "grad_distance" in rec.stats and rec.prior is not None
    with pytest.raises(ConfigError, match="refine and refine_steps go together"):
        create_attack("learned-inversion", {"refine": "ig"})


def test_a_secure_aggregate_or_a_view_without_the_public_split_is_refused_in_one_line(digits8):
    import dataclasses

    attack = create_attack("learned-inversion", TINY)
    view = view_of(attack, digits8, [0])
    with pytest.raises(ConfigError, match="secure aggregate of 3 clients"):
        attack.reconstruct(dataclasses.replace(view, clients=3))
    with pytest.raises(ConfigError, match="holds no public split"):
        attack.reconstruct(dataclasses.replace(view, secrets=None))


# -- the learned inverter on digits (what Wu et al. claim) -------------------------------------------------
def _noise_probe(digits, sigma, params, victims=tuple(range(6))):
    return probe_attack(
        digits,
        [("gaussian-noise", {"sigma": sigma})],
        "learned-inversion",
        {"pairs": 1000, **params},
        model_params=TANH_LENET,
        victims=victims,
        pool=max(60, len(victims)),
    )


def test_the_inverter_reconstructs_digits_beyond_its_placebos(digits16):
    """Under light noise (σ 0.01) the inverter's images beat the best of its placebos (the same inverter on
    public batches of the victim's labels): it reads the update, not the label."""
    r = _noise_probe(digits16, 0.01, {})
    margins = [a - b for a, b in zip(r.private, r.prior, strict=True)]
    assert statistics.fmean(margins) > 0.08, (r.private, r.prior)  # measured +0.179
    assert sum(m > 0 for m in margins) >= 4  # measured 6 of 6, two at +0.014


def test_under_noise_that_drowns_the_update_the_placebos_keep_the_inverter_from_counting_leaks(digits16):
    """The null: at σ 10 the update carries nothing the inverter can read; its images (about the class
    mean) must not beat the best of its placebos, the same inverter on public batches' updates."""
    r = _noise_probe(digits16, 10.0, {}, victims=tuple(range(12)))
    margins = [a - b for a, b in zip(r.private, r.prior, strict=True)]
    assert statistics.fmean(margins) < -0.05, (r.private, r.prior)  # measured −0.186 (3 of 12 above)


def test_training_through_the_defense_is_what_beats_the_noise(digits16):
    """Wu et al.'s point: the defense's distortion is learned from the pairs. The same inverter trained on
    clean updates (the defense removed from its pairs) loses on noised ones (σ 1)."""
    through = _noise_probe(digits16, 1.0, {}, victims=tuple(range(12)))
    clean = _noise_probe(digits16, 1.0, {"through_defense": False}, victims=tuple(range(12)))
    gaps = [a - b for a, b in zip(through.private, clean.private, strict=True)]
    assert statistics.fmean(gaps) > 0.15, (through.private, clean.private)  # measured +0.32
    assert sum(g > 0 for g in gaps) >= 8  # measured 10 of 12


# -- the diffusion prior ---------------------------------------------------------------------------------
def test_the_cosine_schedule_falls_from_one_to_near_zero():
    a = cosine_alphas_bar(100)
    assert a.shape == (100,) and bool((a[1:] < a[:-1]).all())
    assert 0.99 < float(a[0]) < 1 and float(a[-1]) < 1e-3


def test_the_denoiser_learns_the_noise_and_sdedit_keeps_what_a_small_strength_does_not_noise(digits8):
    images, labels = digits8.public.x[:64], digits8.public.y[:64]
    model, stats = train_denoiser(
        images, labels, 10, timesteps=20, steps=150, batch=32, lr=3e-3, width=8, seed=0
    )
    assert stats["loss"] < 0.6  # an untrained ε-predictor scores about 1
    gen = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    kept = sample(model, labels[:8], 20, size=(8, 8), generator=gen(), images=images[:8], start=1)
    drawn = sample(model, labels[:8], 20, size=(8, 8), generator=gen())
    assert (kept - images[:8]).abs().mean() < 0.05
    assert (drawn - images[:8]).abs().mean() > 2 * (kept - images[:8]).abs().mean()
    assert torch.equal(drawn, sample(model, labels[:8], 20, size=(8, 8), generator=gen()))
    with pytest.raises(ValueError, match="start 21 outside"):
        sample(model, labels[:1], 20, size=(8, 8), generator=gen(), images=images[:1], start=21)


def test_the_sampler_returns_the_image_an_exact_noise_predictor_points_to():
    """With the exact ε (the noise that took x₀ to x_t), every step's x̂₀ is x₀: from noise or from any
    start, ancestral sampling lands on x₀."""
    T = 20
    x0 = torch.rand(3, 1, 4, 4, generator=torch.Generator().manual_seed(1))

    class Oracle(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = torch.nn.Conv2d(1, 1, 1)  # the sampler reads the channels here

        def forward(self, x, t, y):
            a = cosine_alphas_bar(T)[t][:, None, None, None]
            return (x - a.sqrt() * (x0 * 2 - 1)) / (1 - a).sqrt()

    gen = torch.Generator().manual_seed(0)
    labels = torch.zeros(3, dtype=torch.long)
    assert torch.allclose(sample(Oracle(), labels, T, size=(4, 4), generator=gen), x0, atol=1e-4)
    start = torch.rand(3, 1, 4, 4, generator=gen)
    assert torch.allclose(
        sample(Oracle(), labels, T, size=(4, 4), generator=gen, images=start, start=7), x0, atol=1e-4
    )


def test_the_diffusion_prior_refuses_what_its_u_net_cannot_take():
    with pytest.raises(ConfigError, match="2, 4 or a multiple of 8"):
        create_attack("guide", {"diffusion_width": 12})
    params = create_attack("guide").params
    with pytest.raises(ValueError, match="must be even, not 15×15"):
        params.check_data((1, 15, 15), 10)
    params.check_data((1, 16, 16), 10)


def fitted_guide(digits, tmp_path, **params):
    attack = create_attack("guide", {"attack_params": TINY, **TINY_DIFFUSION, **params})
    cache = ArtifactCache(tmp_path / "cache")
    return attack.with_artifact(attack.fit(FitData(digits.info, digits.public, None, 0, CPU, cache=cache)))


def test_guide_denoises_the_base_attacks_images_with_the_same_denoising_of_its_reference(digits8, tmp_path):
    attack = fitted_guide(digits8, tmp_path)
    view = view_of(attack, digits8, [0, 1])
    (rec,) = attack.reconstruct_many([view], seeds=[5])
    assert rec.images.shape == (2, 1, 8, 8) and rec.prior.shape == (8, 1, 8, 8)  # the inverter's 4 placebos
    assert rec.stats["guide_start"] == 2.0  # 30 % of 8 steps
    (again,) = attack.reconstruct_many([view], seeds=[5])
    assert torch.equal(rec.images, again.images) and torch.equal(rec.prior, again.prior)
    assert attack.threat.knowledge >= create_attack("learned-inversion").threat.knowledge
    with pytest.raises(ConfigError, match="without a fit of its own"):
        create_attack("guide", {"attack": "ggl"})


def test_a_prior_that_returns_the_class_template_does_not_count_as_a_leak(digits16, monkeypatch):
    """The diffusion prior's own draw is the victim's reference: a prior that ignores the image and
    returns each label's template scores high SSIM, yet leaks no victim."""

    def template(model, labels, timesteps, *, size, generator, images=None, start=None, **_):
        return class_template(digits16.public, labels)

    monkeypatch.setattr(guide_module, "sample", template)
    r = probe_attack(
        digits16,
        [("gaussian-noise", {"sigma": 1.0})],
        "guide",
        {"attack_params": TINY, **TINY_DIFFUSION},
        model_params=TANH_LENET,
        victims=tuple(range(6)),
    )
    mean_image = digits16.public.x.mean(dim=0, keepdim=True)
    floor = [float(ssim(mean_image, digits16.train.x[i : i + 1])) for i in range(6)]
    assert (
        sum(victim_leaked(s, f) for s, f in zip(r.private, floor, strict=True)) >= 3
    )  # above the mean image
    assert not any(victim_leaked(s, max(f, p)) for s, f, p in zip(r.private, floor, r.prior, strict=True))


SMALL_DIFFUSION = {"diffusion_steps": 300, "diffusion_width": 8}


def test_guide_keeps_what_the_inverter_found_above_the_same_denoising_of_its_placebos(digits16):
    """GUIDE on the learned inverter under light noise (σ 0.01): the denoised images beat the inverter's
    placebos denoised alike (same noise) — the base attack's information survives the prior."""
    r = probe_attack(
        digits16,
        [("gaussian-noise", {"sigma": 0.01})],
        "guide",
        {"attack_params": {"pairs": 1000}, **SMALL_DIFFUSION},
        model_params=TANH_LENET,
        victims=tuple(range(6)),
    )
    margins = [a - b for a, b in zip(r.private, r.prior, strict=True)]
    assert statistics.fmean(margins) > 0.06, (r.private, r.prior)  # measured +0.136


def test_posterior_sampling_reads_the_update_beyond_its_placebos(digits16):
    """diffusion-posterior (DPS on the update's cosine distance) under noise σ 0.1 beats its placebos: the
    same sampler steered by public batches' updates of the victim's labels."""
    r = probe_attack(
        digits16,
        [("gaussian-noise", {"sigma": 0.1})],
        "diffusion-posterior",
        SMALL_DIFFUSION,
        model_params=TANH_LENET,
        victims=tuple(range(6)),
    )
    margins = [a - b for a, b in zip(r.private, r.prior, strict=True)]
    assert statistics.fmean(margins) > 0.12, (r.private, r.prior)  # measured +0.283
    assert sum(m > 0 for m in margins) >= 4  # measured 6 of 6
    with pytest.raises(ConfigError, match="give guidance > 0"):
        create_attack("guide", {"attack": None})
    with pytest.raises(ConfigError, match="guidance steers draws without a base attack"):
        create_attack("guide", {"guidance": 0.02})
