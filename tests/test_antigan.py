"""Anti-GAN (Luo & Zhang, TKDD 2025): Eq. 2's window-variance loss, the revised mixup, the two-stage client
fit with its shared checkpoints, the data stage, class-level SSIM (Eq. 5), DP-SGD at a target ε, and the
GAN attack of Hitaj et al. as a participant of FL training."""

import pytest
import torch
from skimage.metrics import structural_similarity

from leakshield.artifacts import ArtifactCache, FitData
from leakshield.attacks import create_attack
from leakshield.attacks.participant import HitajGAN, with_fake_class
from leakshield.data import load_dataset
from leakshield.defenses import create_defense
from leakshield.defenses.antigan import revised_mixup, window_variance_loss
from leakshield.errors import ConfigError, LeakshieldError
from leakshield.experiment import ExperimentRunner, ResultStore, parse_config
from leakshield.fl import LocalTraining
from leakshield.metrics.class_ssim import class_level_ssim, pairwise_ssim
from leakshield.models import create_model

from helpers import client_context

CPU = torch.device("cpu")
TINY_GAN = {"cgan_steps": 4, "finetune_steps": 2, "batch_size": 8, "width": 8, "checkpoint_every": 2,
            "extractor_epochs": 1}  # fmt: skip


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", {"size": 16})


def test_window_variance_loss_is_eq_2():
    flat = torch.full((2, 1, 8, 8), 0.5)  # every window has variance 0: m·v_e² with m = 4 windows
    assert window_variance_loss(flat, 0.5, window=4).item() == pytest.approx(4 * 0.25)
    checker = torch.zeros(1, 1, 4, 4)
    checker[..., ::2, ::2] = checker[..., 1::2, 1::2] = 1  # ±1 half and half on [−1, 1]: variance 1
    assert window_variance_loss(checker, 1.0, window=4).item() == pytest.approx(0.0)
    assert window_variance_loss(checker, 0.5, window=4).item() == pytest.approx(0.25)


def test_descending_eq_2_obfuscates_flat_windows_and_keeps_the_pattern(digits):
    """Fig. 2(a): gradient descent on the pixels adds noise to flat windows (the background) while the
    image keeps its overall pattern."""
    x = digits.train.x[:4].clone()
    pixels = (x + 0.01 * torch.randn(x.shape, generator=torch.Generator().manual_seed(0))).requires_grad_()
    opt = torch.optim.Adam([pixels], lr=0.01)
    for _ in range(200):
        loss = window_variance_loss(pixels.clamp(0, 1), 0.5, window=4)
        opt.zero_grad()
        loss.backward()
        opt.step()
    out = pixels.detach().clamp(0, 1)
    background = x < 0.05
    assert out[background].std() > 5 * x[background].std()
    assert torch.corrcoef(torch.stack([out.flatten(), x.flatten()]))[0, 1] > 0.3


def test_revised_mixup_mixes_each_image_once():
    real, fake = torch.rand(3, 1, 4, 4), torch.rand(3, 1, 4, 4)
    assert torch.allclose(revised_mixup(real, fake, 0.3), 0.3 * real + 0.7 * fake)
    with pytest.raises(ValueError, match="differ"):
        revised_mixup(real, fake[:2], 0.5)


def test_pairwise_ssim_matches_scikit_image_with_a_uniform_window():
    g = torch.Generator().manual_seed(0)
    a = torch.rand(3, 1, 16, 16, generator=g)
    b = (0.7 * a[[0, 2]] + 0.2 * torch.rand(2, 1, 16, 16, generator=g)).clamp(0, 1)
    ours = pairwise_ssim(a, b, window=7, chunk=2)
    for i in range(3):
        for j in range(2):
            ref = structural_similarity(a[i, 0].numpy(), b[j, 0].numpy(), win_size=7, gaussian_weights=False,
                                        use_sample_covariance=False, data_range=1)  # fmt: skip
            assert ours[i, j].item() == pytest.approx(ref, abs=1e-5)


def test_class_level_ssim_is_eq_5():
    g = torch.Generator().manual_seed(1)
    private, labels = torch.rand(6, 1, 12, 12, generator=g), torch.tensor([0, 0, 0, 1, 1, 1])
    generated, gen_labels = private[[0, 4]], torch.tensor([0, 1])
    value, per_class = class_level_ssim(generated, gen_labels, private, labels)
    pairs = pairwise_ssim(generated, private)
    assert per_class[0] == pytest.approx(pairs[0, :3].mean().item(), abs=1e-6)
    assert per_class[1] == pytest.approx(pairs[1, 3:].mean().item(), abs=1e-6)
    assert value == pytest.approx((per_class[0] + per_class[1]) / 2, abs=1e-6)
    with pytest.raises(ValueError, match="no generated image"):
        class_level_ssim(generated, torch.tensor([5, 5]), private, labels)


def test_pairwise_ssim_edges_dark_images_clamping_and_shapes():
    """The cases mutation testing found untested (survivors of mutmut over metrics/): dark, flat images
    where C1 decides the luminance term; inputs outside [0, 1], clamped as a data range of 1 implies; a
    window as large as the image; mismatched shapes."""
    g = torch.Generator().manual_seed(2)
    dark = 0.02 * torch.rand(2, 1, 8, 8, generator=g)
    ours = pairwise_ssim(dark[:1], dark[1:], window=8)  # one window: the whole image
    assert ours.shape == (1, 1)
    assert ours.item() == pytest.approx(_uniform_ssim(dark[0, 0].double(), dark[1, 0].double()), abs=1e-6)
    wild = torch.rand(2, 1, 8, 8, generator=g) * 3 - 1  # values in [−1, 2]
    clamped = wild.clamp(0, 1)
    assert torch.allclose(
        pairwise_ssim(wild, wild[:1], window=4), pairwise_ssim(clamped, clamped[:1], window=4)
    )
    with pytest.raises(ValueError, match="do not match"):
        pairwise_ssim(torch.rand(1, 1, 8, 8), torch.rand(1, 3, 8, 8))
    with pytest.raises(ValueError, match="do not match"):
        pairwise_ssim(torch.rand(1, 8, 8), torch.rand(1, 8, 8))
    with pytest.raises(ValueError, match="window needs larger images"):
        pairwise_ssim(torch.rand(1, 1, 8, 8), torch.rand(1, 1, 8, 8), window=9)


def _uniform_ssim(x: torch.Tensor, y: torch.Tensor, k1: float = 0.01, k2: float = 0.03) -> float:
    """SSIM of two images with one window covering both whole (population statistics, data range 1)."""
    mx, my = x.mean(), y.mean()
    vx, vy = ((x - mx) ** 2).mean(), ((y - my) ** 2).mean()
    cov = ((x - mx) * (y - my)).mean()
    c1, c2 = k1**2, k2**2
    return float((2 * mx * my + c1) * (2 * cov + c2) / ((mx**2 + my**2 + c1) * (vx + vy + c2)))


def test_class_level_ssim_skips_classes_without_private_images_and_keeps_the_window():
    g = torch.Generator().manual_seed(3)
    private, labels = torch.rand(4, 1, 12, 12, generator=g), torch.tensor([1, 1, 2, 2])
    generated, gen_labels = torch.rand(3, 1, 12, 12, generator=g), torch.tensor([0, 1, 2])  # 0: none private
    value, per_class = class_level_ssim(generated, gen_labels, private, labels, window=4)
    assert sorted(per_class) == [1, 2] and value == pytest.approx((per_class[1] + per_class[2]) / 2)
    with_window = [pairwise_ssim(generated[2:], private[2:], window=w).mean().item() for w in (4, 8)]
    assert per_class[2] == pytest.approx(with_window[0], abs=1e-6)
    assert per_class[2] != pytest.approx(with_window[1], abs=1e-6)


def _stored(cache):
    return {p.name for p in cache.root.glob("*/*") if p.parent.name != "samples"}


def _fit(defense, data, cache, digits):
    return defense.fit(FitData(digits.info, data, None, 0, CPU, False, cache, digits.public))


def test_antigan_fit_mixes_every_image_with_a_generated_one_of_its_class(digits, tmp_path):
    data = digits.train.subset(list(range(40)))
    defense = create_defense("antigan", {**TINY_GAN, "mix": 0.3})
    artifact = _fit(defense, data, ArtifactCache(tmp_path), digits)
    mixed, generated = artifact.tensors["mixed"], artifact.tensors["generated"]
    assert mixed.shape == generated.shape == data.x.shape
    assert torch.allclose(mixed, 0.3 * data.x + 0.7 * generated, atol=1e-6)
    ctx = client_context(data=data, info=digits.info, public=digits.public)
    import dataclasses

    ctx = dataclasses.replace(ctx, artifact=artifact)
    outside = digits.test.x[:1]
    x, y = defense.data_hook(torch.cat([data.x[[5, 2]], outside]), torch.tensor([1, 2, 3]), ctx)
    assert torch.equal(x[:2], mixed[[5, 2]]) and y.tolist() == [1, 2, 3]
    assert not torch.equal(x[2], outside[0]) and (x[2] - 0.3 * outside[0]).min() >= -1e-6  # mixed on the spot


def test_a_variance_sweep_reuses_the_first_stage_and_a_mix_sweep_both(digits, tmp_path):
    data = digits.train.subset(list(range(40)))
    cache = ArtifactCache(tmp_path)
    _fit(create_defense("antigan", TINY_GAN), data, cache, digits)
    first = len(cache.fitted)
    stored = _stored(cache)
    _fit(create_defense("antigan", {**TINY_GAN, "variance": 0.9}), data, cache, digits)
    new = _stored(cache) - stored
    assert len(new) == 1  # stage 2's final checkpoint only (steps 5..6): stage 1 was reused
    stored |= new
    _fit(create_defense("antigan", {**TINY_GAN, "variance": 0.9, "mix": 0.8}), data, cache, digits)
    assert _stored(cache) == stored and len(cache.fitted) == first


def test_fine_tuning_with_eq_4_moves_window_variance_toward_v_e(digits, tmp_path):
    """The paper's second stage: λ·L_obf makes the generated images' windows noisier (v_e = 0.9 is far
    above the digits' own window variance), which the first stage alone does not."""
    data = digits.train.subset(list(range(200)))
    cache = ArtifactCache(tmp_path)
    base = {**TINY_GAN, "cgan_steps": 30, "batch_size": 32, "width": 16, "checkpoint_every": 100}
    plain = _fit(create_defense("antigan", {**base, "finetune_steps": 0}), data, cache, digits)
    tuned = _fit(create_defense("antigan", {**base, "finetune_steps": 60, "variance": 0.9}), data, cache,
                 digits)  # fmt: skip
    loss_plain = window_variance_loss(plain.tensors["generated"], 0.9).item()
    loss_tuned = window_variance_loss(tuned.tensors["generated"], 0.9).item()
    assert loss_tuned < 0.5 * loss_plain, (loss_plain, loss_tuned)


def test_antigan_needs_the_public_split(digits):
    with pytest.raises(ConfigError, match="public"):
        create_defense("antigan", TINY_GAN).fit(FitData(digits.info, digits.train, None, 0, CPU))


def test_dpsgd_at_a_target_epsilon_spends_about_it():
    defense = create_defense("dp-sgd", {"target_epsilon": 2.0, "target_steps": 100})
    q = 32 / 500
    sigma = defense.params.sigma(q)
    assert sigma > 0
    spent = defense.privacy_spent({0: (100, q)})
    assert spent["epsilon_target"] == 2.0 and 1.8 <= spent["epsilon"] <= 2.0
    assert defense.privacy_spent({0: (200, q)})["epsilon"] > 2.0  # trained past the planned steps
    with pytest.raises(LeakshieldError, match="target_steps"):
        create_defense("dp-sgd", {"target_epsilon": 2.0})


def test_the_attackers_discriminator_gains_a_fake_output():
    model = create_model("antigan-cnn", in_shape=(1, 16, 16), num_classes=10)
    D = with_fake_class(model, 10, torch.ones(1, 100), torch.zeros(1))
    x = torch.rand(3, 1, 16, 16)
    model.eval(), D.eval()
    out = D(x)
    assert out.shape == (3, 11) and torch.allclose(out[:, :10], model(x))
    assert model(x).shape == (3, 10)  # the received model itself is unchanged


def test_hitaj_targets_the_classes_the_attacker_lacks(digits):
    attack = create_attack("hitaj", {"width": 8})
    mine = digits.train.subset((digits.train.y >= 5).nonzero().flatten().tolist())
    attacker = attack.participant(1, mine, LocalTraining(), digits.info, seed=0)
    assert attacker.targets == [0, 1, 2, 3, 4] and attacker.inject_label == 5
    with pytest.raises(ConfigError, match="every class"):
        attack.participant(1, digits.train, LocalTraining(), digits.info, seed=0)
    with pytest.raises(LeakshieldError, match="participant"):
        attack.reconstruct(None)
    assert isinstance(attack, HitajGAN)


def test_hitaj_attacker_holds_only_its_own_data_and_what_it_received(digits):
    """The participant contract: its reply is a function of the model sent and its own data; the
    injected samples carry the wrong label it owns."""
    attack = create_attack("hitaj", {"width": 8, "inject": 16, "generator_steps": 2, "head_steps": 1})
    mine = digits.train.subset((digits.train.y >= 5).nonzero().flatten().tolist()[:50])
    attacker = attack.participant(1, mine, LocalTraining(batch_size=200), digits.info, seed=0)
    model = create_model("antigan-cnn", in_shape=digits.info.shape, num_classes=10)
    update = attacker.fit(model, 0)
    assert update.protocol.num_samples == 50 + 16
    head = update.delta["classifier.bias"]
    assert head[5] != 0 and attacker.fake_weight is not None and attacker.fake_weight.shape == (1, 100)


@pytest.fixture(scope="module")
def trained_digits_model(digits):
    """antigan-cnn trained on the 16-pixel digits (three epochs, seeded): the discriminator the GAN
    attacker receives once FL has trained the global model."""
    model = create_model("antigan-cnn", in_shape=digits.info.shape, num_classes=10, seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(0)
    x, y = digits.info.normalize(digits.train.x), digits.train.y
    for _ in range(3):
        for batch in torch.randperm(len(y), generator=gen).split(32):
            loss = torch.nn.functional.cross_entropy(model(x[batch]), y[batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model.eval()


def test_the_gan_attackers_generator_learns_the_classes_it_lacks(digits, trained_digits_model):
    """Hitaj et al.'s core step: the generator descends the discriminator's loss for its target label,
    so the trained global model classifies its samples as the target classes far more often than before
    (the attacker owns classes 5–9 and targets 0–4). Measured over attacker seeds 0–4 (200 generator
    steps, a model at 0.93 test accuracy): before, 0.00 of the samples land in their target class, after
    1.00 for every seed; with the generator loss negated (stepping up the loss) 0.00 for every seed."""
    model = trained_digits_model
    mine = digits.train.subset((digits.train.y >= 5).nonzero().flatten().tolist())
    attack = create_attack("hitaj", {"width": 16, "head_steps": 2, "batch_size": 32, "lr": 2e-3})
    attacker = attack.participant(1, mine, LocalTraining(), digits.info, seed=0)

    def hit_rate() -> float:
        released = attacker.release(200, seed=1)
        with torch.no_grad():
            predicted = model(digits.info.normalize(released.x)).argmax(1)
        return (predicted == released.y).float().mean().item()

    before = hit_rate()
    attacker.train_generator(model, 200)
    after = hit_rate()
    assert before < 0.3 and after > 0.7, (before, after)


def test_a_gan_cell_scores_class_level_ssim_and_draws_the_grid(tmp_path):
    config = parse_config({
        "name": "gan-tiny",
        "dataset": {"name": "digits", "size": 16},
        "models": ["antigan-cnn"],
        "fl": {"clients": 2, "partition": {"kind": "by-class", "classes": [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]},
               "local": {"algorithm": "fedavg", "local_lr": 0.05, "batch_size": 32}, "defended_clients": [0]},
        "defenses": ["none", {"name": "antigan", **TINY_GAN}],
        "attacks": [{"name": "hitaj", "rounds": 2, "generator_steps": 2, "final_steps": 2, "samples": 30,
                     "width": 8}],
        "utility": {"rounds": 1},
        "report": {"values": ["class_ssim", "accuracy", "adr"]},
    })  # fmt: skip
    runner = ExperimentRunner(
        config, tmp_path / "run", device="cpu", progress=False, cache_dir=tmp_path / "cache"
    )
    runner.run()
    records = [r for r in ResultStore(tmp_path / "run" / "results.sqlite").records() if r.attack == "hitaj"]
    assert len(records) == 2 and all(r.status == "ok" for r in records)
    for r in records:
        assert -1 <= r.metrics["class_ssim"] <= 1 and r.metrics["samples"] == 30
        assert 0 < r.metrics["class_ssim_public"] <= 1
        assert [v["class"] for v in r.victims] == [0, 1, 2, 3, 4]
        assert (tmp_path / "run" / r.images).is_file()
    from leakshield.report import build_report

    report = build_report(tmp_path / "run").html.read_text()
    assert "class-level SSIM" in report


def test_clients_listing_the_same_classes_share_them_disjointly():
    """Anti-GAN Table 2's split: two groups of clients, each group dealt one half of the classes."""
    from leakshield.data.partition import ByClassPartition, partition_indices

    labels = torch.arange(200) % 10
    halves = [[0, 1, 2, 3, 4]] * 2 + [[5, 6, 7, 8, 9]] * 2
    parts = partition_indices(labels, 4, ByClassPartition(kind="by-class", classes=halves), seed=0)
    assert [len(p) for p in parts] == [50, 50, 50, 50]
    assert not set(parts[0].tolist()) & set(parts[1].tolist())
    assert set(labels[torch.cat(parts[:2])].tolist()) == {0, 1, 2, 3, 4}
    assert set(labels[torch.cat(parts[2:])].tolist()) == {5, 6, 7, 8, 9}


def test_the_passive_attacker_replies_like_an_honest_client(digits):
    """Anti-GAN Table 1's passive variant: the generator still trains, the reply is the honest one."""
    from leakshield.defenses import DefensePipeline
    from leakshield.fl import HonestClient

    mine = digits.train.subset((digits.train.y >= 5).nonzero().flatten().tolist()[:40])
    local = LocalTraining(algorithm="fedavg", batch_size=16)
    attack = create_attack("hitaj-passive", {"width": 8, "generator_steps": 2, "head_steps": 1})
    attacker = attack.participant(1, mine, local, digits.info, seed=0)
    model = create_model("antigan-cnn", in_shape=digits.info.shape, num_classes=10)
    before = {k: v.clone() for k, v in attacker.generator.state_dict().items()}
    update = attacker.fit(model, 0)
    honest = HonestClient(1, mine, local, DefensePipeline(), digits.info).fit(model, 0)
    assert all(torch.equal(update.delta[k], honest.delta[k]) for k in honest.delta)
    assert any(not torch.equal(v, attacker.generator.state_dict()[k]) for k, v in before.items())


def test_a_report_shows_n_a_for_a_score_that_was_not_finite():
    """A federation the attack made diverge leaves non-finite samples; their score is stored as null."""
    from leakshield.report.html import _number

    assert _number(None, ".3f") == "n/a" and _number(0.25, ".3f") == "0.250"
