"""Client updates, the FedSGD/FedAvg simulation and the attacker's ServerView."""

import pytest
import torch

from leakshield.data import IIDPartition, ImageSet, partition_indices
from leakshield.defenses import DefensePipeline
from leakshield.fl import (
    FederatedSimulation,
    FLConfig,
    LocalTraining,
    ThreatModel,
    build_server_view,
    compute_update,
    cross_entropy,
)
from leakshield.metrics import accuracy
from leakshield.models import create_model


def _batch(digits3, n=4):
    return digits3.train.subset(list(range(n)))


def _update(model, batch, info, local=None, mode="train"):
    return compute_update(
        model,
        batch,
        local or LocalTraining(),
        DefensePipeline(),
        info=info,
        generator=torch.Generator(),
        model_mode=mode,
    )


def test_fedsgd_update_is_the_mean_batch_gradient(digits3):
    model = create_model("lenet", in_shape=digits3.info.shape, num_classes=10)
    batch = _batch(digits3)
    update, trace = _update(model, batch, digits3.info)
    model.zero_grad()
    cross_entropy(model(digits3.info.normalize(batch.x)), batch.y).backward()
    for name, param in model.named_parameters():
        assert torch.allclose(update.delta[name], param.grad, atol=1e-7)
    assert update.protocol.algorithm == "fedsgd" and update.protocol.num_samples == 4
    assert torch.equal(trace.defended_x, batch.x)


def test_fedavg_update_unrolls_local_sgd(digits3):
    model = create_model("lenet", in_shape=digits3.info.shape, num_classes=10)
    batch = _batch(digits3, 2)
    local = LocalTraining(algorithm="fedavg", local_lr=0.1, batch_size=2, local_epochs=1)
    update, _ = _update(model, batch, digits3.info, local)
    # one step over the whole batch: Δθ = −lr·g
    grad, _ = _update(model, batch, digits3.info)
    for name in update.delta:
        assert torch.allclose(update.delta[name], -0.1 * grad.delta[name], atol=1e-6)
    assert update.protocol.local_steps == 1
    assert torch.allclose(update.gradient()["classifier.bias"], grad.delta["classifier.bias"], atol=1e-5)
    multi = LocalTraining(algorithm="fedavg", local_lr=0.1, batch_size=1, local_epochs=2, momentum=0.5)
    update2, _ = _update(model, batch, digits3.info, multi)
    assert update2.protocol.local_steps == 4
    with pytest.raises(ValueError, match="unroll"):
        update2.gradient()
    # the model the client trained from is untouched
    assert torch.equal(update2.global_params["classifier.bias"], model.classifier.bias.detach())


def _simulate(digits3, algorithm, seed):
    cfg = FLConfig(
        clients=4,
        clients_per_round=3,
        local=LocalTraining(algorithm=algorithm, local_lr=0.1, batch_size=16, momentum=0.9),
    )
    parts = partition_indices(digits3.train.y, 4, IIDPartition(), seed=0)
    clients = [digits3.train.subset(p) for p in parts]
    model = create_model("lenet", in_shape=digits3.info.shape, num_classes=10, seed=seed)
    FederatedSimulation.honest(model, clients, cfg, DefensePipeline(), digits3.info, seed=seed).run(3)
    return model


@pytest.mark.parametrize("algorithm", ["fedsgd", "fedavg"])
def test_simulation_is_reproducible(digits3, algorithm):
    a, b = _simulate(digits3, algorithm, 0), _simulate(digits3, algorithm, 0)
    c = _simulate(digits3, algorithm, 1)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    assert not torch.equal(a.classifier.weight, c.classifier.weight)


def test_fedavg_training_learns_digits(digits3):
    cfg = FLConfig(
        clients=5, local=LocalTraining(algorithm="fedavg", local_lr=0.1, momentum=0.9, batch_size=16)
    )
    parts = partition_indices(digits3.train.y, 5, IIDPartition(), seed=0)
    clients = [digits3.train.subset(p) for p in parts]
    model = create_model("lenet", in_shape=digits3.info.shape, num_classes=10)
    before = accuracy(model, digits3.test, normalize=digits3.info.normalize)
    FederatedSimulation.honest(model, clients, cfg, DefensePipeline(), digits3.info).run(15)
    after = accuracy(model, digits3.test, normalize=digits3.info.normalize)
    assert after > 0.6 > before + 0.3


def test_server_view_is_detached_hookless_and_withholds_labels(digits3):
    model = create_model("convnet", {"width": 2}, in_shape=digits3.info.shape, num_classes=10)
    seen = []
    model.features[0].register_forward_hook(lambda m, i, o: seen.append(o))
    batch = _batch(digits3, 2)
    update, _ = _update(model, batch, digits3.info, mode="eval")
    hidden = build_server_view(model, update, digits3.info, ThreatModel(labels_known=False), labels=batch.y)
    granted = build_server_view(model, update, digits3.info, ThreatModel(labels_known=True), labels=batch.y)
    assert hidden.labels is None and torch.equal(granted.labels, batch.y)
    for module in hidden.model.modules():
        assert not module._forward_hooks and not module._forward_pre_hooks and not module._backward_hooks
    assert all(p.grad is None for p in hidden.model.parameters())
    assert not hidden.model.training  # eval mode by default (SPEC §4)
    assert all(not t.requires_grad for t in hidden.update.delta.values())
    hidden.update.delta["classifier.bias"].add_(1.0)
    assert not torch.equal(hidden.update.delta["classifier.bias"], update.delta["classifier.bias"])


def test_train_mode_client_leaves_the_global_model_untouched(digits3):
    model = create_model("resnet20", {"width": 4}, in_shape=digits3.info.shape, num_classes=10)
    model.eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    update, _ = _update(model, _batch(digits3, 4), digits3.info, mode="train")
    assert not model.training
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    moved = [k for k, v in update.buffers.items() if v.is_floating_point() and not torch.equal(v, before[k])]
    assert moved, "the client's BatchNorm statistics are reported in the update"


def test_imageset_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="bad ImageSet"):
        ImageSet(torch.zeros(2, 1, 4, 4), torch.zeros(3, dtype=torch.long))
