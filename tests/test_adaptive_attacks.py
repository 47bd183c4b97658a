"""Adaptive attacks: each reads only the public configuration of the defense it targets."""

from __future__ import annotations

import pytest
import torch

from leakshield.attacks import ATTACKS, create_attack
from leakshield.attacks.adaptive.carlini import CarliniAttack
from leakshield.data import ImageSet
from leakshield.defenses import DEFENSES, DefensePipeline
from leakshield.defenses.mixing import InstaHideParams, MixUpParams
from leakshield.errors import ConfigError
from leakshield.fl import (
    HonestClient,
    LocalTraining,
    ServerKnowledge,
    ThreatModel,
    observe_victim,
    server_view_of,
)
from leakshield.metrics import ssim
from leakshield.models import create_model

from helpers import client_context

ADAPTIVE = sorted(entry.name for entry in ATTACKS if entry.targets)


def pipeline(*entries):
    return DefensePipeline.from_config([{"name": n, "params": p} for n, p in entries])


def view_under(model, batch, info, pipe, **kw):
    return server_view_of(model, batch, info, defenses=pipe, labels_known=True, **kw)


def test_every_adaptive_attack_declares_its_targets():
    # ten for the baselines, PRECODE and DCS², ats-pinned, loda-inverse, ggl-adaptive, censor-aware; two
    # that evade client guards (fishing-stealthy, trap-weights-stealthy); two that learn (learned-inversion,
    # guide)
    assert len(ADAPTIVE) == 18
    assert all("adaptive vs" not in entry.summary for entry in ATTACKS if entry.name not in ADAPTIVE)


@pytest.mark.parametrize("name", ADAPTIVE)
def test_adaptive_attacks_are_registered_and_name_real_defenses(name):
    entry = ATTACKS.get(name)
    assert entry.reference and "adaptive vs" in entry.summary
    for target in entry.targets:
        assert DEFENSES.get(target).name == target


def test_noise_aware_matches_with_the_noise_likelihood(digits3):
    model = create_model("lenet", in_shape=digits3.info.shape, num_classes=10, seed=0).eval()
    batch = digits3.train.subset([0, 1])
    attack = create_attack("noise-aware")
    cases = {
        ("gaussian-noise", (("sigma", 0.1),)): ("l2", 1 / (2 * 0.1**2)),
        ("laplacian-noise", (("scale", 0.1),)): ("l1", 1 / 0.1),
        ("dp-sgd", (("noise_multiplier", 1.0), ("clip", 2.0))): ("l2", 1 / (2 * (1.0 * 2.0 / 2) ** 2)),
    }
    entries = sum(p.numel() for p in model.parameters())
    for (name, params), (distance, weight) in cases.items():
        view = view_under(model, batch, digits3.info, pipeline((name, dict(params))))
        adapted = attack.adapted(view).params
        assert adapted.distance == distance
        assert adapted.layer_weights["*"] == pytest.approx(weight / entries)
    clipped = attack.adapted(view_under(model, batch, digits3.info, pipeline(("clipping", {})))).params
    assert clipped.distance == "cosine"
    plain = attack.adapted(view_under(model, batch, digits3.info, pipeline(("none", {})))).params
    assert plain == attack.params


def test_soteria_bypass_drops_the_defended_layer(digits3):
    model = create_model("lenet", in_shape=digits3.info.shape, num_classes=10, seed=0).eval()
    view = view_under(model, digits3.train.subset([0]), digits3.info, pipeline(("soteria", {})))
    adapted = create_attack("soteria-bypass").adapted(view)
    assert adapted.params.layer_weights == {"classifier.weight": 0.0}
    assert "classifier.weight" not in adapted._matched_names(view.model, view)
    assert "classifier.bias" in adapted._matched_names(view.model, view)


def test_dropout_expectation_averages_the_dummy_gradient_over_masks(digits3):
    model = create_model("lenet", in_shape=digits3.info.shape, num_classes=10, seed=0)
    pipe = pipeline(("dropout", {}))
    model = pipe.model_hook(model).eval()
    view = view_under(model, digits3.train.subset([0]), digits3.info, pipe)
    attack = create_attack("dropout-expectation", {"dropout_samples": 3})
    x = digits3.info.normalize(digits3.train.x[:1])
    names = attack._matched_names(view.model, view)
    torch.manual_seed(0)
    mean, _ = attack._dummy_update(view.model, names, x, torch.tensor([0]), view, 3)
    torch.manual_seed(0)
    draws = [attack._dummy_update(view.model, names, x, torch.tensor([0]), view, 1)[0] for _ in range(3)]
    for k in range(len(names)):
        assert torch.allclose(mean[k], sum(d[k] for d in draws) / 3, atol=1e-6)
    assert not attack.vectorizable([view, view])  # random layers are attacked one victim at a time


def test_pruning_aware_matching_ignores_pruned_entries(digits3):
    """At the true image, the masked matching loss is ~0 under pruning while the plain one is not."""
    model = create_model("mlp", {"width": 64}, in_shape=digits3.info.shape, num_classes=10, seed=0).eval()
    batch = digits3.train.subset([0])
    view = view_under(model, batch, digits3.info, pipeline(("pruning", {"ratio": 0.9})))
    x = digits3.info.normalize(batch.x)
    for match_released, small in ((True, True), (False, False)):
        attack = create_attack("pruning-aware", {"match_released": match_released, "distance": "l2"})
        names = attack._matched_names(view.model, view)
        dummy, _ = attack._dummy_update(view.model, names, x, batch.y, view)
        target = [view.update.delta[n] for n in names]
        if match_released:
            dummy = [d * (t != 0) for d, t in zip(dummy, target, strict=True)]
        loss = float(sum(((d - t) ** 2).sum() for d, t in zip(dummy, target, strict=True)).detach())
        assert (loss < 1e-8) == small


def test_carlini_needs_a_mixing_defense(digits3):
    model = create_model("mlp", {"width": 32}, in_shape=digits3.info.shape, num_classes=10, seed=0).eval()
    view = view_under(model, digits3.train.subset([0]), digits3.info, pipeline(("none", {})))
    with pytest.raises(ConfigError, match="mixup or instahide"):
        create_attack("carlini", {"rounds": 1, "inner": "analytic"}).reconstruct_from_rounds([view])


def encodings_of(image_indices, digits3, params, rounds, seed=0):
    """What a client under the defense trains on over ``rounds`` epochs (the attack's decode input)."""
    name = "instahide" if isinstance(params, InstaHideParams) else "mixup"
    pipe = pipeline((name, params.model_dump()))
    pool = digits3.train.subset(list(range(50)))
    private = digits3.train.subset(image_indices)
    out = []
    for t in range(rounds):
        context = client_context(seed * 1000 + t, data=pool, info=digits3.info, public=digits3.public)
        x, _ = pipe.data_hook(private.x, private.y, context)
        out.append(digits3.info.normalize(x))
    return private, torch.cat(out)


def test_carlini_groups_encodings_that_share_a_private_image(digits3):
    params = InstaHideParams()
    _, encodings = encodings_of([0, 1], digits3, params, rounds=20)
    groups = CarliniAttack._group(encodings, 2, seed=0)
    truth = torch.arange(len(encodings)) % 2  # each round encodes image 0 then image 1
    agreement = float((groups == truth).float().mean())
    assert max(agreement, 1 - agreement) >= 0.9


@pytest.mark.parametrize("params", [MixUpParams(), InstaHideParams()], ids=["mixup", "instahide"])
def test_carlini_decoding_beats_any_single_encoding(digits3, params):
    """Eq. 3 over 30 encodings of one private image recovers it better than the encodings themselves."""
    info = digits3.info
    private, encodings = encodings_of([3], digits3, params, rounds=30)
    attack = create_attack("carlini", {"steps": 500})
    x, stats = attack.decode(encodings, 1, params, info, digits3.public.x.mean(0))
    decoded = float(ssim(info.denormalize(x).clamp(0, 1), private.x))
    single = float(ssim(info.denormalize(encodings).clamp(0, 1), private.x.expand_as(encodings)).mean())
    assert decoded > single + 0.1, (decoded, single)
    assert 0.3 < stats["own_coefficient"] < 0.65


def test_carlini_end_to_end_over_rounds(digits3):
    """Real gradients of an MLP under InstaHide over 10 rounds, inverted analytically, then decoded."""
    info = digits3.info
    model = create_model("mlp", {"width": 64}, in_shape=info.shape, num_classes=10, seed=0).eval()
    batch = digits3.train.subset([5])
    pool = digits3.train.subset(list(range(50)))
    client = HonestClient(
        0, pool, LocalTraining(), pipeline(("instahide", {})), info, public=digits3.public, model_mode="eval"
    )
    attack = create_attack("carlini", {"rounds": 10, "inner": "analytic", "steps": 500})
    observation = observe_victim(
        [model] * 10,
        batch,
        client,
        threat=ThreatModel(True),
        server=attack,
        knowledge=ServerKnowledge(info, digits3.public),
    )
    views = observation.views
    assert torch.equal(views[0].secrets.image, digits3.public.x.mean(dim=0))  # the partners' stand-in
    rec = attack.reconstruct_from_rounds(views, seed=0)
    plain = create_attack("analytic").reconstruct(views[0])
    assert float(ssim(rec.images, batch.x)) > float(ssim(plain.images, batch.x)) + 0.1
    assert rec.stats["rounds"] == 10


def test_mixing_partners_come_from_the_whole_client_dataset(digits3):
    """The client's other images are blank: every encoding is then its own image scaled by its first
    coefficient (one ratio per image), which partners drawn from the batch would break."""
    info = digits3.info
    model = create_model("mlp", {"width": 32}, in_shape=info.shape, num_classes=10, seed=0).eval()
    batch = digits3.train.subset([0, 1, 2, 3])
    blank = ImageSet(torch.zeros(10, *info.shape), torch.full((10,), 9))
    for dataset, own_partners in ((blank, True), (batch, False)):
        client = HonestClient(0, dataset, LocalTraining(), pipeline(("mixup", {})), info, model_mode="eval")
        trace = observe_victim([model], batch, client, threat=ThreatModel(True)).trace
        lit = batch.x > 0.1
        ratios = [trace.defended_x[i][lit[i]] / batch.x[i][lit[i]] for i in range(4)]
        constant = all(float(r.max() - r.min()) < 1e-5 and 0.1 < float(r[0]) <= 0.65 for r in ratios)
        assert constant == own_partners


def test_dropout_mask_is_read_off_the_update_exactly(digits3):
    """With the mask inferred from the zero weight-gradient columns, the true image reproduces the
    client's update exactly: the dropout's randomness is no secret in a batch of one."""
    from leakshield.attacks.adaptive.inversion import _dropout_then_linear, infer_dropout_masks

    info = digits3.info
    pipe = pipeline(("dropout", {}))
    model = pipe.model_hook(create_model("lenet", in_shape=info.shape, num_classes=10, seed=0)).eval()
    batch = digits3.train.subset([0])
    view = view_under(model, batch, info, pipe)
    (dropout, weight), *_ = _dropout_then_linear(view.model)
    assert weight == "classifier.1.weight"
    assert infer_dropout_masks(view.model, view.update.delta) == 1
    assert 0.3 < float(dropout.fixed_mask.float().mean()) < 0.7  # about half the features kept
    attack = create_attack("dropout-mask")
    names = attack._matched_names(view.model, view)
    dummy, _ = attack._dummy_update(view.model, names, info.normalize(batch.x), batch.y, view)
    for name, d in zip(names, dummy, strict=True):
        assert torch.allclose(d, view.update.delta[name], atol=1e-6), name
