"""Baseline defenses: unit tests on tiny inputs (what each stage does to an update or a batch)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from leakshield.data import ImageSet
from leakshield.defenses import DEFENSES, DefensePipeline, create_defense
from leakshield.defenses.clipping import update_norm
from leakshield.defenses.dpsgd import dp_epsilon
from leakshield.defenses.dropout import ActiveDropout
from leakshield.defenses.mixing import MixUp, sample_coefficients
from leakshield.defenses.soteria import defended_linear, representation_scores
from leakshield.errors import ConfigError
from leakshield.fl import LocalTraining, compute_update, plain_gradient
from leakshield.gradients import per_sample_gradients
from leakshield.models import create_model

from helpers import client_context

BASELINES = [
    "gaussian-noise",
    "laplacian-noise",
    "clipping",
    "pruning",
    "quantization",
    "soteria",
    "dp-sgd",
    "dropout",
    "mixup",
    "instahide",
    "augmentation",
]


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def big_update() -> dict[str, torch.Tensor]:
    g = gen(1)
    return {"a.weight": torch.randn(200, 100, generator=g), "a.bias": torch.randn(100, generator=g) * 1e-3}


@pytest.mark.parametrize("name", BASELINES)
def test_every_baseline_is_registered_with_a_reference_and_docstring(name):
    entry = DEFENSES.get(name)
    assert entry.reference and entry.summary
    defense = create_defense(name)
    assert type(defense).__doc__ and defense.public_config().name == name


def test_invalid_parameters_name_the_field():
    with pytest.raises(ConfigError, match="ratio"):
        create_defense("pruning", {"ratio": 1.5})
    with pytest.raises(ConfigError, match="format"):
        create_defense("quantization", {"format": "int4"})
    with pytest.raises(ConfigError, match="k_private"):
        create_defense("instahide", {"k": 4, "k_private": 5})
    with pytest.raises(ConfigError, match="alpha"):
        create_defense("mixup", {"k": 4, "alpha": [1, 1]})
    with pytest.raises(ConfigError, match="sigma"):
        create_defense("gaussian-noise", {"sigma": -1})


def test_none_shares_the_plain_update():
    """The baseline every table compares against: each stage is the identity."""
    model = create_model("lenet", in_shape=(1, 16, 16), num_classes=10, seed=0).eval()
    x, y = torch.rand(4, 1, 16, 16, generator=gen()), torch.tensor([1, 2, 3, 4])
    none = create_defense("none")
    assert none.model_hook(model) is model
    hx, hy = none.data_hook(x, y, client_context())
    assert torch.equal(hx, x) and torch.equal(hy, y)
    plain = plain_gradient(model, x, y)
    shared = none.release_hook(none.gradient(model, x, y, client_context()), client_context())
    assert shared.keys() == plain.keys() and all(torch.allclose(shared[k], plain[k]) for k in plain)


def test_gaussian_noise_has_the_configured_std_and_is_seeded():
    update = big_update()
    defense = create_defense("gaussian-noise", {"sigma": 0.1})
    out = defense.release_hook(update, client_context(3))
    noise = out["a.weight"] - update["a.weight"]
    assert abs(float(noise.std()) - 0.1) < 0.005 and abs(float(noise.mean())) < 0.005
    again = defense.release_hook(update, client_context(3))
    assert torch.equal(out["a.weight"], again["a.weight"])
    assert not torch.equal(out["a.weight"], defense.release_hook(update, client_context(4))["a.weight"])


def test_laplacian_noise_has_the_configured_scale():
    update = big_update()
    out = create_defense("laplacian-noise", {"scale": 0.1}).release_hook(update, client_context(0))
    noise = out["a.weight"] - update["a.weight"]
    assert abs(float(noise.abs().mean()) - 0.1) < 0.005  # E|Laplace(0, b)| = b
    assert abs(float(noise.std()) - 0.1 * math.sqrt(2)) < 0.01


def test_clipping_bounds_the_global_norm_and_keeps_small_updates():
    update = big_update()
    clipped = create_defense("clipping", {"bound": 1.0}).release_hook(update, client_context())
    assert abs(float(update_norm(clipped)) - 1.0) < 1e-4
    ratio = clipped["a.weight"] / update["a.weight"]
    assert torch.allclose(ratio, ratio.flatten()[0].expand_as(ratio))  # direction kept
    unchanged = create_defense("clipping", {"bound": 1e6}).release_hook(update, client_context())
    assert all(torch.equal(unchanged[k], update[k]) for k in update)


def test_pruning_per_tensor_keeps_the_largest_entries_of_every_tensor():
    update = big_update()
    out = create_defense("pruning", {"ratio": 0.9}).release_hook(update, client_context())
    for k, v in out.items():
        kept = v != 0
        assert int(kept.sum()) == math.ceil(0.1 * v.numel())
        assert float(update[k].abs()[kept].min()) >= float(update[k].abs()[~kept].max())


def test_global_pruning_uses_one_threshold():
    update = big_update()  # the bias is 1000× smaller than the weight: a global threshold prunes all of it
    out = create_defense("pruning-global", {"ratio": 0.9}).release_hook(update, client_context())
    assert int((out["a.bias"] != 0).sum()) == 0
    total = sum(int((v != 0).sum()) for v in out.values())
    assert total == math.ceil(0.1 * sum(v.numel() for v in update.values()))


def test_quantization_fp16_and_int8():
    update = big_update()
    half = create_defense("quantization").release_hook(update, client_context())
    assert torch.allclose(half["a.weight"], update["a.weight"], rtol=1e-3, atol=1e-6)
    int8 = create_defense("quantization", {"format": "int8"}).release_hook(update, client_context())
    w = update["a.weight"]
    scale = float(w.abs().max()) / 127
    assert float((int8["a.weight"] - w).abs().max()) <= scale / 2 + 1e-6
    assert len(torch.unique(int8["a.weight"])) <= 255


def test_soteria_batched_scores_equal_one_backward_per_feature():
    model = create_model("lenet", in_shape=(1, 16, 16), num_classes=10, seed=0).eval()
    x = torch.rand(3, 1, 16, 16, generator=gen()).requires_grad_(True)
    r = model.features(x).flatten(1)
    batched = representation_scores(r, x, 0.1, chunk=50)
    loop = torch.empty(r.shape[1])
    for f in range(r.shape[1]):
        (jac,) = torch.autograd.grad(r[:, f].sum(), x, retain_graph=True)
        loop[f] = (jac.flatten(1).norm(dim=1) / (r[:, f].detach().abs() + 0.1)).sum()
    assert torch.allclose(batched, loop, rtol=1e-4, atol=1e-6)


def test_soteria_prunes_the_lowest_scoring_columns_of_the_defended_layer_only():
    model = create_model("lenet", in_shape=(1, 16, 16), num_classes=10, seed=0).eval()
    x, y = torch.rand(2, 1, 16, 16, generator=gen()), torch.tensor([1, 2])
    plain = plain_gradient(model, x, y)
    defended = create_defense("soteria", {"percentile": 60}).gradient(model, x, y, client_context())
    name, _ = defended_linear(model)
    assert name == "classifier"
    pruned = (defended["classifier.weight"] == 0).all(dim=0) & (plain["classifier.weight"] != 0).any(dim=0)
    assert abs(float(pruned.float().mean()) - 0.6) < 0.02
    kept = ~pruned
    assert torch.equal(defended["classifier.weight"][:, kept], plain["classifier.weight"][:, kept])
    for k in plain:
        if k != "classifier.weight":
            assert torch.allclose(defended[k], plain[k])
    with pytest.raises(ConfigError, match=r"soteria\.layer"):
        defended_linear(model, "nope")


def test_dpsgd_without_noise_or_clipping_is_the_plain_gradient():
    model = create_model("lenet", in_shape=(1, 16, 16), num_classes=10, seed=0).eval()
    x, y = torch.rand(4, 1, 16, 16, generator=gen()), torch.tensor([1, 2, 3, 4])
    plain = plain_gradient(model, x, y)
    dp = create_defense("dp-sgd", {"noise_multiplier": 0.0, "clip": 1e9}).gradient(
        model, x, y, client_context()
    )
    assert all(torch.allclose(dp[k], plain[k], atol=1e-6) for k in plain)


def test_dpsgd_clips_every_sample():
    model = create_model("lenet", in_shape=(1, 16, 16), num_classes=10, seed=0).eval()
    x, y = torch.rand(4, 1, 16, 16, generator=gen()), torch.tensor([1, 2, 3, 4])
    samples = per_sample_gradients(model, x, y)
    norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in samples.values()))
    assert (norms > 0.01).all()
    dp = create_defense("dp-sgd", {"noise_multiplier": 0.0, "clip": 0.01}).gradient(
        model, x, y, client_context()
    )
    assert float(update_norm(dp)) <= 0.01 + 1e-6


def test_dpsgd_adds_gaussian_noise_of_std_sigma_c_over_b():
    """Abadi et al., Algorithm 1: (Σ clip_C(g_b) + N(0, σ²C²I)) / B. With clipping inactive, the update
    minus the plain mean gradient is zero-mean noise of std σC/B (within 3 % on the 9,466 entries of
    this LeNet; the estimate's sd is 0.7 %)."""
    model = create_model("lenet", in_shape=(1, 16, 16), num_classes=10, seed=0).eval()
    x, y = torch.rand(4, 1, 16, 16, generator=gen()), torch.tensor([1, 2, 3, 4])
    plain = plain_gradient(model, x, y)
    sigma, clip = 0.5, 1e3
    dp = create_defense("dp-sgd", {"noise_multiplier": sigma, "clip": clip}).gradient(
        model, x, y, client_context()
    )
    noise = torch.cat([(dp[k] - plain[k]).flatten() for k in plain])
    assert noise.numel() > 9_000
    assert float(noise.std()) == pytest.approx(sigma * clip / len(x), rel=0.03)
    assert abs(float(noise.mean())) < 0.05 * float(noise.std())


def test_dpsgd_replaces_batchnorm_by_groupnorm_and_accounts_epsilon():
    model = create_model("convnet", {"width": 4}, in_shape=(3, 32, 32), num_classes=10, seed=0)
    fixed = create_defense("dp-sgd").model_hook(model)
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in fixed.modules())
    assert any(isinstance(m, nn.GroupNorm) for m in fixed.modules())
    few, many = dp_epsilon(1.1, 0.1, 10, 1e-5), dp_epsilon(1.1, 0.1, 1000, 1e-5)
    assert 0 < few < many < math.inf
    assert dp_epsilon(2.0, 0.1, 1000, 1e-5) < many  # more noise, less ε
    assert dp_epsilon(1.1, 0.1, 0, 1e-5) == 0 and dp_epsilon(0.0, 0.1, 5, 1e-5) == math.inf
    spent = create_defense("dp-sgd").privacy_spent({0: (10, 0.1), 1: (1000, 0.1)})
    assert spent["epsilon"] == pytest.approx(many) and spent["delta"] == 1e-5


def test_dropout_is_active_whenever_gradients_are_computed():
    model = create_model("lenet", in_shape=(1, 16, 16), num_classes=10, seed=0)
    model = create_defense("dropout").model_hook(model).eval()
    assert isinstance(model.classifier[0], ActiveDropout)
    x = torch.rand(2, 1, 16, 16, generator=gen())
    torch.manual_seed(0)
    a, b = model(x), model(x)
    assert not torch.equal(a, b)  # eval mode, still a fresh mask per differentiated forward
    with torch.no_grad():
        assert torch.equal(model(x), model(x))  # plain inference uses the expectation


def test_client_updates_with_random_stages_are_reproducible_per_generator(digits3):
    model = create_model("lenet", in_shape=digits3.info.shape, num_classes=10, seed=0)
    pipeline = DefensePipeline.from_config([{"name": "dropout"}, {"name": "dp-sgd"}])
    model = pipeline.model_hook(model)
    batch = digits3.train.subset([0, 1])

    def update(seed):
        u, _ = compute_update(model, batch, LocalTraining(), pipeline, info=digits3.info, generator=gen(seed))
        return u.delta

    first, again, other = update(5), update(5), update(6)
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not all(torch.equal(first[k], other[k]) for k in first)


def test_mixing_coefficients_follow_the_dirichlet_with_a_cap():
    lam = sample_coefficients(500, [3, 1, 1, 1], 0.65, gen())
    assert torch.allclose(lam.sum(1), torch.ones(500), atol=1e-6)
    assert float(lam.max()) <= 0.65 and float(lam.min()) >= 0
    assert float(lam[:, 0].mean()) > float(lam[:, 1:].mean()) + 0.2  # the own image's share is largest


def in_client(digits3, pool, seed):
    """The context of a client holding ``pool`` (partners are drawn from it)."""
    return client_context(seed, data=pool, info=digits3.info, public=digits3.public)


def test_mixup_mixes_with_partners_of_the_local_dataset(digits3):
    mixup = create_defense("mixup")
    pool = digits3.train.subset(list(range(20)))
    x, y = digits3.train.x[:3], digits3.train.y[:3]
    mixed, labels = mixup.data_hook(x, y, in_client(digits3, pool, 0))
    assert mixed.shape == x.shape and labels.shape == (3, 10)
    assert torch.allclose(labels.sum(1), torch.ones(3), atol=1e-6)
    assert float(mixed.min()) >= 0 and float(mixed.max()) <= 1  # convex combinations of images
    assert not torch.equal(mixed, x)
    again, _ = mixup.data_hook(x, y, in_client(digits3, pool, 1))
    assert not torch.equal(again, mixed)  # new mixings every call (every epoch)
    # the image's own label gets the first coefficient, the largest on average
    assert float(labels[torch.arange(3), y].mean()) >= 0.2


def test_instahide_flips_signs_in_normalized_space_and_mixes_public_images(digits3):
    info = digits3.info
    x, y = digits3.train.x[:4], digits3.train.y[:4]
    plain = create_defense("instahide", {"sign_flip": False})
    flipped = create_defense("instahide")
    pool = digits3.train.subset(list(range(20)))
    mixed, labels = plain.data_hook(x, y, in_client(digits3, pool, 2))
    encoded, labels2 = flipped.data_hook(x, y, in_client(digits3, pool, 2))
    assert torch.allclose(info.normalize(encoded).abs(), info.normalize(mixed).abs(), atol=1e-5)
    assert float(encoded.min()) < 0  # flipped pixels leave the [0, 1] range
    assert torch.equal(labels, labels2)
    assert (labels.sum(1) < 1 - 1e-3).all()  # public partners carry no label (InstaHide)


def test_augmentation_crops_and_flips():
    x = torch.rand(6, 1, 8, 8, generator=gen())
    identity = create_defense("augmentation", {"padding": 0, "flip": False})
    assert torch.equal(identity.data_hook(x, torch.zeros(6), client_context())[0], x)
    flip_only = create_defense("augmentation", {"padding": 0, "flip": True}).data_hook(
        x, torch.zeros(6), client_context()
    )[0]
    for a, b in zip(flip_only, x, strict=True):
        assert torch.equal(a, b) or torch.equal(a, b.flip(-1))
    cropped = create_defense("augmentation", {"padding_pixels": 4}).data_hook(
        x, torch.zeros(6), client_context()
    )[0]
    assert cropped.shape == x.shape and not torch.equal(cropped, x)
    # each image is a window of the zero-padded image (maybe flipped), at offsets spread over 0..2p
    padded = torch.nn.functional.pad(x, (4, 4, 4, 4))
    offsets = set()
    for i in range(6):
        for dy in range(9):
            for dx in range(9):
                window = padded[i, :, dy : dy + 8, dx : dx + 8]
                if torch.equal(cropped[i], window) or torch.equal(cropped[i], window.flip(-1)):
                    offsets.add((dy, dx))
    assert len(offsets) >= 4 and offsets != {(0, 0)}  # random windows, not one fixed corner


def test_defenses_stack_in_order(digits3):
    pipeline = DefensePipeline.from_config(
        [{"name": "mixup"}, {"name": "gaussian-noise", "params": {"sigma": 1}}]
    )
    model = create_model("lenet", in_shape=digits3.info.shape, num_classes=10, seed=0)
    batch = digits3.train.subset([0, 1])
    update, trace = compute_update(
        model, batch, LocalTraining(), pipeline, info=digits3.info, generator=gen(), public=digits3.public
    )
    assert trace.defended_x is not None and not torch.equal(trace.defended_x, batch.x)  # mixed first
    assert float(update_norm(update.delta)) > 100  # then noise of std 1 on every entry
    with pytest.raises(ValueError, match="replace the gradient computation"):
        DefensePipeline.from_config([{"name": "soteria"}, {"name": "dp-sgd"}])


def test_mixing_pool_defaults_to_the_data_the_client_holds(digits3, monkeypatch):
    seen = []
    original = MixUp.data_hook

    def spy(self, x, y, context):
        seen.append(context.dataset)
        return original(self, x, y, context)

    monkeypatch.setattr(MixUp, "data_hook", spy)
    batch = ImageSet(digits3.train.x[:2], digits3.train.y[:2])
    pool = digits3.train.subset(list(range(30)))
    model = create_model("lenet", in_shape=digits3.info.shape, num_classes=10, seed=0)
    pipeline = DefensePipeline([create_defense("mixup")])
    compute_update(model, batch, LocalTraining(), pipeline, info=digits3.info, generator=gen())
    compute_update(model, batch, LocalTraining(), pipeline, info=digits3.info, generator=gen(), pool=pool)
    assert seen[0] is batch and seen[1] is pool


def test_augmentation_pads_a_fraction_of_the_side_and_flips_where_the_dataset_allows() -> None:
    """1/8 of the side: 2 px at 16 px, 4 px at 32 (the paper's), 28 at 224; no flip on digits (a
    mirrored 2 is no digit), a flip on CIFAR-like data; pixel padding beyond half the side refused."""
    from leakshield.data import load_dataset
    from leakshield.data.types import DatasetInfo
    from leakshield.errors import ConfigError

    params = create_defense("augmentation").params
    assert [params.pixels(side) for side in (16, 32, 224)] == [2, 4, 28]
    assert not load_dataset("digits", {"size": 16}).info.mirror_keeps_class
    x = torch.rand(64, 1, 16, 16, generator=gen())
    digits = DatasetInfo("digits", (1, 16, 16), 10, (0.0,), (1.0,), mirror_keeps_class=False)
    objects = DatasetInfo("objects", (1, 16, 16), 10, (0.0,), (1.0,))
    only_flip = create_defense("augmentation", {"padding": 0})
    kept = only_flip.data_hook(x, torch.zeros(64), client_context(info=digits))[0]
    flipped = only_flip.data_hook(x, torch.zeros(64), client_context(info=objects))[0]
    assert torch.equal(kept, x) and not torch.equal(flipped, x)
    # shifted by at most 2 px at 16 px: some image is moved, none by more than 2 rows of zeros
    moved = create_defense("augmentation", {"flip": False}).data_hook(x, torch.zeros(64), client_context())[0]
    assert not torch.equal(moved, x)
    assert all(int((img.abs().sum(-1) == 0).sum()) <= 2 for img in moved[:, 0])
    with pytest.raises(ConfigError, match="padding counts pixels no more: write padding_pixels: 4"):
        create_defense("augmentation", {"padding": 4})  # a config from before the fraction
    with pytest.raises(ConfigError, match="padding_pixels 9 exceeds half the image side"):
        create_defense("augmentation", {"padding_pixels": 9}).data_hook(x, torch.zeros(64), client_context())
