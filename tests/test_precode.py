"""PRECODE: the bottleneck module, its KL term in every loss, its placement, what it does to IG, and the
adaptive attacks that show where it leaks (Scheliga et al., WACV 2022; Balunović et al., ICLR 2022)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from leakshield.attacks import create_attack
from leakshield.defenses import DefensePipeline, create_defense
from leakshield.defenses.precode import PrecodeBottleneck, gaussian_kl
from leakshield.errors import ConfigError
from leakshield.fl import FederatedSimulation, FLConfig, LocalTraining, plain_gradient, server_view_of
from leakshield.gradients import per_sample_gradients
from leakshield.loss import cross_entropy
from leakshield.metrics import match_reconstructions, psnr, ssim
from leakshield.metrics.utility import accuracy
from leakshield.models import create_model
from leakshield.models.base import auxiliary_loss, is_stochastic


def precode_model(name="mlp", params=None, in_shape=(3, 8, 8), seed=0, **precode):
    params = {"width": 32} if params is None else params
    model = create_model(name, params, in_shape=in_shape, num_classes=10, seed=seed)
    pipe = DefensePipeline([create_defense("precode", precode)])
    return pipe.model_hook(model, seed=seed), pipe


def test_bottleneck_samples_on_every_forward_in_eval_mode_too():
    layer = PrecodeBottleneck(16, k=4).eval()
    x = torch.randn(3, 16)
    a, b = layer(x), layer(x)
    assert a.shape == x.shape and not torch.allclose(a, b)
    assert is_stochastic(torch.nn.Sequential(layer))
    image_like = torch.randn(2, 1, 4, 4)
    assert layer(image_like).shape == image_like.shape  # a drop-in layer: reshaped back
    with pytest.raises(ValueError, match="built for 16 features"):
        layer(torch.randn(2, 8))


def test_kl_term_is_the_closed_form_in_bits_or_nats_and_is_counted_once():
    mu, sigma = torch.randn(5, 4), torch.rand(5, 4) + 0.1
    reference = torch.distributions.kl_divergence(
        torch.distributions.Normal(mu, sigma), torch.distributions.Normal(0.0, 1.0)
    ).sum(dim=1)
    assert torch.allclose(gaussian_kl(mu, sigma), reference, atol=1e-5)
    for units, scale in (("bits", 1 / math.log(2)), ("nats", 1.0)):
        layer = PrecodeBottleneck(6, k=4, beta=0.5, kl_units=units)
        x = torch.randn(5, 6)
        layer(x)
        stats = layer.encoder(x)
        mu, sigma = stats[:, :4], torch.nn.functional.softplus(stats[:, 4:])
        expected = 0.5 * gaussian_kl(mu, sigma).mean() * scale
        assert torch.allclose(auxiliary_loss(torch.nn.Sequential(layer)), expected, atol=1e-5)
        assert auxiliary_loss(torch.nn.Sequential(layer)) == 0.0  # popped


def test_shared_gradient_is_that_of_ce_plus_beta_kl():
    model, _ = precode_model(beta=1.0)
    x, y = torch.rand(2, 3, 8, 8), torch.tensor([1, 2])
    torch.manual_seed(5)
    shared = plain_gradient(model, x, y)
    torch.manual_seed(5)  # the same bottleneck sample
    logits = model(x)
    bottleneck = model.classifier[0]
    kl = bottleneck.pop_auxiliary_loss()
    ce_only = torch.autograd.grad(cross_entropy(logits, y), bottleneck.encoder.weight, retain_graph=True)[0]
    both = torch.autograd.grad(cross_entropy(logits, y) + kl, bottleneck.encoder.weight)[0]
    assert torch.allclose(shared["classifier.0.encoder.weight"], both, atol=1e-6)
    assert not torch.allclose(both, ce_only)


def test_placement_before_the_classifier_or_after_a_named_module():
    model, _ = precode_model()
    assert isinstance(model.classifier[0], PrecodeBottleneck) and model.classifier[0].features == 32
    lenet, _ = precode_model("lenet", {}, in_shape=(1, 16, 16), position="features.1", k=8)
    assert isinstance(lenet.features[1][1], PrecodeBottleneck)
    assert lenet.features[1][1].features == 12 * 8 * 8
    assert lenet(torch.rand(2, 1, 16, 16)).shape == (2, 10)
    with pytest.raises(ConfigError, match=r"precode\.position: no module 'nope'; allowed e\.g\.: classifier"):
        precode_model(position="nope")


def test_model_stage_is_seeded_and_copies_cleanly():
    a, _ = precode_model(seed=3)
    b, _ = precode_model(seed=3)
    c, _ = precode_model(seed=4)
    assert torch.equal(a.classifier[0].encoder.weight, b.classifier[0].encoder.weight)
    assert not torch.equal(a.classifier[0].encoder.weight, c.classifier[0].encoder.weight)
    a(torch.rand(2, 3, 8, 8))  # leaves a pending loss term with a graph
    copy.deepcopy(a)(torch.rand(1, 3, 8, 8))


def test_dp_sgd_per_sample_gradients_include_the_kl_term():
    """Each per-sample gradient equals ∇(CE_i + β·KL_i) computed independently. The decoder's weight is
    zeroed so that the output, hence CE, does not depend on the bottleneck's random sample: the encoder
    (and the layers before it) then receive β·∇KL only, which is deterministic."""
    model, _ = precode_model(beta=0.5)
    bottleneck = model.classifier[0]
    with torch.no_grad():
        bottleneck.decoder.weight.zero_()
    x, y = torch.rand(3, 3, 8, 8), torch.tensor([0, 1, 2])
    grads = per_sample_gradients(model, x, y)
    for i in range(3):
        features = model.features(x[i : i + 1])
        stats = bottleneck.encoder(features)
        mu, sigma = stats[:, : bottleneck.k], torch.nn.functional.softplus(stats[:, bottleneck.k :])
        kl = gaussian_kl(mu, sigma).mean() / math.log(2)
        logits = model.classifier[1](bottleneck.decoder.bias.expand(1, -1))
        loss = cross_entropy(logits, y[i : i + 1]) + 0.5 * kl
        names = [n for n, _ in model.named_parameters() if n != "classifier.0.decoder.weight"]
        params = dict(model.named_parameters())
        expected = torch.autograd.grad(loss, [params[n] for n in names], allow_unused=True)
        for name, want in zip(names, expected, strict=True):
            want = torch.zeros_like(params[name]) if want is None else want
            assert torch.allclose(grads[name][i], want, atol=1e-6), name
    assert float(grads["classifier.0.encoder.weight"].abs().sum()) > 0  # the KL's own gradient


def test_fl_training_under_precode_learns(digits3):
    info = digits3.info
    model, pipe = precode_model("mlp", {"width": 64}, in_shape=info.shape)
    config = FLConfig(
        clients=2, local=LocalTraining(algorithm="fedavg", local_lr=0.05, momentum=0.9, batch_size=32)
    )
    clients = [digits3.train.subset(list(range(i, 600, 2))) for i in range(2)]
    before = accuracy(model, digits3.test, normalize=info.normalize)
    FederatedSimulation.honest(model, clients, config, pipe, info, seed=0).run(3)
    after = accuracy(model, digits3.test, normalize=info.normalize)
    assert after > max(0.6, before + 0.3)
    # the bottleneck samples at inference too: the evaluation is seeded, hence reproducible
    assert accuracy(model, digits3.test, normalize=info.normalize) == after


def _attack(model, pipe, batches, info, name, params):
    views = [
        server_view_of(model, b, info, defenses=pipe, labels_known=True, seed=i)
        for i, b in enumerate(batches)
    ]
    recs = create_attack(name, params).reconstruct_many(views, seeds=list(range(len(views))))
    out = []
    for rec, batch in zip(recs, batches, strict=True):
        matched = rec.images[match_reconstructions(rec.images, batch.x)]
        out.append((float(psnr(matched, batch.x).mean()), float(ssim(matched, batch.x).mean())))
    return out


def test_precode_stops_ig_on_an_mlp_that_ig_inverts_without_it(digits3):
    """PRECODE Table 1 in small: IG inverts the plain MLP (SSIM ≥ 0.6), not the PRECODE one."""
    info = digits3.info
    batches = [digits3.train.subset([i]) for i in (0, 7)]
    plain = create_model("mlp", {"width": 256}, in_shape=info.shape, num_classes=10, seed=0).eval()
    defended, pipe = precode_model("mlp", {"width": 256}, in_shape=info.shape)
    without = _attack(plain, DefensePipeline(), batches, info, "ig", {"iterations": 300})
    with_precode = _attack(defended.eval(), pipe, batches, info, "ig", {"iterations": 300})
    assert all(s >= 0.6 for _, s in without)
    assert all(s < 0.3 for _, s in with_precode)
    # the analytic adaptive attack reads the image off the first fully connected layer exactly
    analytic = _attack(defended.eval(), pipe, batches, info, "precode-analytic", {})
    assert all(p >= 40 for p, _ in analytic)


def test_precode_analytic_inverts_features_when_no_linear_layer_sees_the_image(digits3):
    """On LeNet the bottleneck's input z and ∂L/∂z are read off the encoder's gradient; matching the
    deterministic layers before it beats plain IG, which the bottleneck's sampling defeats."""
    info = digits3.info
    model, pipe = precode_model("lenet", {"activation": "tanh", "init_range": None}, in_shape=info.shape)
    batches = [digits3.train.subset([0])]
    (ig,) = _attack(model.eval(), pipe, batches, info, "ig", {"iterations": 400})
    (adaptive,) = _attack(model.eval(), pipe, batches, info, "precode-analytic", {"iterations": 1000})
    assert adaptive[1] >= 0.5 and adaptive[1] > ig[1] + 0.3


def test_precode_expectation_averages_over_bottleneck_samples(digits3):
    info = digits3.info
    model, pipe = precode_model("mlp", {"width": 16}, in_shape=info.shape)
    view = server_view_of(model.eval(), digits3.train.subset([0]), info, defenses=pipe, labels_known=True)
    attack = create_attack("precode-expectation", {"iterations": 3})
    assert attack.params.dropout_samples == 8
    x = info.normalize(digits3.train.x[:1])
    names = attack._matched_names(view.model, view)
    torch.manual_seed(0)
    mean, _ = attack._dummy_update(view.model, names, x, torch.tensor([0]), view, 4)
    torch.manual_seed(0)  # the same four bottleneck samples, one at a time
    draws = [attack._dummy_update(view.model, names, x, torch.tensor([0]), view, 1)[0] for _ in range(4)]
    for k in range(len(names)):
        assert torch.allclose(mean[k], sum(d[k] for d in draws) / 4, atol=1e-6)
    assert not torch.allclose(draws[0][0], draws[1][0])  # the samples differ: the mean is a real average
    rec = attack.reconstruct(view)
    assert rec.images.shape == (1, *info.shape) and torch.isfinite(rec.images).all()
