"""Clients train the way the papers train: ``fl.local.optimizer: adam`` (PRECODE and Anti-GAN train
with Adam) runs ``torch.optim.Adam``'s arithmetic, and an attack that unrolls a FedAvg update follows
the optimizer the client's protocol facts name."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from leakshield.data import load_dataset
from leakshield.defenses import DefensePipeline
from leakshield.errors import ConfigError
from leakshield.experiment.config import parse_config
from leakshield.fl import HonestClient, LocalTraining
from leakshield.fl.client import client_rng
from leakshield.fl.local_training import local_adam, minibatch_schedule
from leakshield.loss import training_loss
from leakshield.models import create_model


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", {"channels": 1, "size": 16})


def precode_model(info):
    pipeline = DefensePipeline.from_config([{"name": "precode", "params": {"k": 8}}])
    net = create_model("mlp", {"width": 32}, in_shape=info.shape, num_classes=10, seed=1)
    return pipeline, pipeline.model_hook(net, seed=1)


def test_the_clients_adam_update_equals_torch_adam_on_the_same_minibatches(digits):
    """A FedAvg client with Adam trains PRECODE's model (variational bottleneck, its sampling and KL
    term) for 2 epochs of shuffled minibatches of 8; torch.optim.Adam driven over the very minibatches
    the client drew, with the same per-step randomness, gives the same update to float32 rounding."""
    info = digits.info
    pipeline, model = precode_model(info)
    data = digits.train.subset(list(range(24)))
    local = LocalTraining(algorithm="fedavg", local_lr=1e-3, local_epochs=2, batch_size=8, optimizer="adam")
    client = HonestClient(0, data, local, pipeline, info, model_mode="train")
    update, _ = client.compute(model, 0, data, client.generator(0))
    assert update.protocol.optimizer == "adam" and update.protocol.local_steps == 6

    _, reference = precode_model(info)
    reference.train()
    before = {k: v.detach().clone() for k, v in reference.named_parameters()}
    optimizer = torch.optim.Adam(reference.parameters(), lr=1e-3)
    generator = client.generator(0)
    for step, idx in minibatch_schedule(len(data), 8, 2, shuffle=True, generator=generator):
        optimizer.zero_grad()
        with client_rng(generator, step):
            training_loss(reference, reference(info.normalize(data.x[idx])), data.y[idx]).backward()
        optimizer.step()
    for name, param in reference.named_parameters():
        expected = param.detach() - before[name]
        assert (update.delta[name] - expected).abs().max().item() < 1e-6, name
        assert expected.abs().max().item() > 1e-4  # it did train
    as_sgd = HonestClient(0, data, local.model_copy(update={"optimizer": "sgd"}), pipeline, info,
                          model_mode="train").compute(model, 0, data, client.generator(0))[0]  # fmt: skip
    assert any((as_sgd.delta[k] - update.delta[k]).abs().max() > 1e-4 for k in as_sgd.delta)


def test_the_differentiable_adam_matches_the_in_place_one():
    """The attack's unrolled Adam (new tensors, differentiable) equals the client's in-place Adam."""
    gen = torch.Generator().manual_seed(0)
    layer = nn.Linear(5, 3)
    x, y = torch.randn(12, 5, generator=gen), torch.randint(0, 3, (12,), generator=gen)
    batches = [torch.arange(i, i + 4) for i in range(0, 12, 4)]

    def gradient(params, idx):
        out = torch.func.functional_call(layer, params, (x[idx],))
        loss = nn.functional.cross_entropy(out, y[idx])
        return dict(
            zip(params, torch.autograd.grad(loss, list(params.values()), create_graph=True), strict=True)
        )

    start = {k: v.detach().clone().requires_grad_(True) for k, v in layer.named_parameters()}
    unrolled = local_adam(start, batches, gradient, lr=0.01, in_place=False)
    in_place = {k: v.detach().clone().requires_grad_(True) for k, v in layer.named_parameters()}
    local_adam(in_place, batches, gradient, lr=0.01, in_place=True)
    for k in unrolled:
        assert (unrolled[k] - in_place[k]).abs().max().item() < 1e-6
    assert unrolled["weight"].requires_grad  # the attack can differentiate through it


def test_adam_is_refused_where_it_has_no_meaning():
    with pytest.raises(ValueError, match="FedSGD"):
        LocalTraining(algorithm="fedsgd", optimizer="adam")
    with pytest.raises(ValueError, match="momentum"):
        LocalTraining(algorithm="fedavg", optimizer="adam", momentum=0.9)
    with pytest.raises(ConfigError, match="optimizer"):
        parse_config({"models": ["lenet"], "attacks": ["ig"], "fl": {"local": {"optimizer": "rmsprop"}}})


def test_adding_the_optimizer_keeps_earlier_fingerprints():
    """Runs stored before the optimizer existed still match their config (sgd is the default)."""
    base = {"models": ["lenet"], "attacks": ["ig"], "fl": {"local": {"algorithm": "fedavg"}}}
    plain = parse_config(base).fingerprint()
    explicit = parse_config({**base, "fl": {"local": {"algorithm": "fedavg", "optimizer": "sgd"}}})
    adam = parse_config({**base, "fl": {"local": {"algorithm": "fedavg", "optimizer": "adam"}}})
    assert explicit.fingerprint() == plain != adam.fingerprint()


def test_the_attacks_fedavg_replay_follows_the_clients_optimizer(digits):
    """An attack that unrolls a FedAvg update replays the client's local optimizer from the protocol
    facts: fed the client's true images, the replay of an Adam client's update equals the update, and
    replaying it with SGD instead does not."""
    import dataclasses

    from leakshield.attacks.passive.inversion.replay import dummy_update
    from leakshield.fl import ThreatModel, build_server_view

    info = digits.info
    model = create_model("mlp", {"width": 16}, in_shape=info.shape, num_classes=10, seed=2).eval()
    data = digits.train.subset(list(range(12)))
    local = LocalTraining(algorithm="fedavg", local_lr=1e-2, batch_size=4, optimizer="adam", shuffle=False)
    client = HonestClient(0, data, local, DefensePipeline(), info, model_mode="eval")
    update, _ = client.compute(model, 0, data, client.generator(0))
    view = build_server_view(model, update, info, ThreatModel(labels_known=True), labels=data.y)
    names = [n for n, _ in view.model.named_parameters()]
    replayed, _ = dummy_update(view.model, names, info.normalize(data.x), data.y, view)
    for name, delta in zip(names, replayed, strict=True):
        assert (delta.detach() - update.delta[name]).abs().max().item() < 1e-6, name
    as_sgd = dataclasses.replace(update, protocol=dataclasses.replace(update.protocol, optimizer="sgd"))
    wrong = dataclasses.replace(view, update=as_sgd)
    replayed_sgd, _ = dummy_update(wrong.model, names, info.normalize(data.x), data.y, wrong)
    gaps = [
        (d.detach() - update.delta[n]).abs().max().item() for n, d in zip(names, replayed_sgd, strict=True)
    ]
    assert max(gaps) > 1e-4
