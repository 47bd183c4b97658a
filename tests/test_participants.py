"""Participants, the server and its observers: clients hold their own state (interleaved clients compute
exactly what they compute one after the other), a participant may be an attacker taking part in training,
observers see what the server sees, aggregators are registered."""

from __future__ import annotations

import copy

import pytest
import torch

from leakshield.data import IIDPartition, partition_indices
from leakshield.defenses import ClientContext, Defense, DefensePipeline, create_defense
from leakshield.fl import (
    AGGREGATORS,
    ClientUpdate,
    FederatedSimulation,
    FLConfig,
    HonestClient,
    LocalTraining,
    RoundObserver,
    create_aggregator,
)
from leakshield.models import create_model
from leakshield.registry import NoParams

FEDAVG = LocalTraining(algorithm="fedavg", local_lr=0.05, momentum=0.9, batch_size=8)


class RunsAnotherClientMidway(Defense):
    """A data stage that, the first time client 0 reaches it, runs another client's whole update: the
    two clients' computations interleave through one shared pipeline."""

    def __init__(self, other) -> None:
        super().__init__(NoParams())
        self.other = other
        self.result: ClientUpdate | None = None

    def data_hook(self, x, y, context: ClientContext):
        if context.client_id == 0 and self.result is None:
            self.result = self.other()
        return x, y


def _clients(digits3, pipeline):
    info = digits3.info
    a = digits3.train.subset(list(range(0, 48)))
    b = digits3.train.subset(list(range(100, 140)))
    return [
        HonestClient(i, data, FEDAVG, pipeline, info, public=digits3.public, seed=3)
        for i, data in enumerate((a, b))
    ]


def test_interleaved_clients_compute_what_they_compute_one_after_the_other(digits3):
    """MixUp draws partners from the client's own dataset and DCS² ranks the client's own samples
    (fraction rule): with state bound on the shared defense objects, client 1 running in the middle of
    client 0's local training would change client 0's partners and sensitive samples."""
    info = digits3.info
    model = create_model("mlp", {"width": 16}, in_shape=info.shape, num_classes=10, seed=0)
    stages = [create_defense("mixup"), create_defense("dcs2", {"fraction": 0.2, "steps": 2})]
    a, b = _clients(digits3, DefensePipeline(stages))
    first, second = a.fit(model, 4), b.fit(model, 4)

    nested = RunsAnotherClientMidway(lambda: b_nested.fit(model, 4))
    pipeline = DefensePipeline([nested, *stages])
    a_nested, b_nested = _clients(digits3, pipeline)
    interleaved_first = a_nested.fit(model, 4)
    assert nested.result is not None  # client 1 ran inside client 0's first minibatch
    for ours, theirs in ((interleaved_first, first), (nested.result, second)):
        assert all(torch.equal(ours.delta[k], theirs.delta[k]) for k in theirs.delta)
    assert not torch.equal(first.delta["classifier.weight"], second.delta["classifier.weight"])


def test_fedsgd_clients_draw_their_own_minibatch(digits3):
    info = digits3.info
    model = create_model("mlp", {"width": 8}, in_shape=info.shape, num_classes=10, seed=0)
    local = LocalTraining(algorithm="fedsgd", batch_size=4)
    data = digits3.train.subset(list(range(40)))
    client = HonestClient(2, data, local, DefensePipeline(), info, seed=1)
    update = client.fit(model, 0)
    assert update.protocol.num_samples == 4
    again = HonestClient(2, data, local, DefensePipeline(), info, seed=1).fit(model, 0)
    later = client.fit(model, 1)
    assert torch.equal(update.delta["classifier.bias"], again.delta["classifier.bias"])
    assert not torch.equal(update.delta["classifier.bias"], later.delta["classifier.bias"])


class Recorder(RoundObserver):
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def round_started(self, round, model):
        self.events.append(("start", round, model.classifier.bias.detach().clone()))

    def update_received(self, round, client_id, update):
        self.events.append(("update", round, client_id, update.protocol.num_samples))

    def round_finished(self, round, model):
        self.events.append(("end", round, model.classifier.bias.detach().clone()))


class ScalingAttacker:
    """A malicious participant: it sends its honest update scaled by 100 and keeps a copy of every model
    it received (what an active attacker, e.g. Hitaj et al.'s GAN client, learns from)."""

    def __init__(self, honest: HonestClient) -> None:
        self.client_id = honest.client_id
        self.honest = honest
        self.received: list[torch.nn.Module] = []

    def fit(self, model, round):
        self.received.append(model)
        update = self.honest.fit(model, round)
        scaled = {k: 100 * v for k, v in update.delta.items()}
        return ClientUpdate(update.global_params, scaled, update.protocol, update.buffers)


def _federation(digits3, aggregator="mean"):
    info = digits3.info
    config = FLConfig(clients=3, local=FEDAVG, aggregator=aggregator)
    parts = partition_indices(digits3.train.y, 3, IIDPartition(), seed=0)
    datasets = [digits3.train.subset(p) for p in parts]
    model = create_model("mlp", {"width": 16}, in_shape=info.shape, num_classes=10, seed=0)
    honest = [HonestClient(i, d, FEDAVG, DefensePipeline(), info) for i, d in enumerate(datasets)]
    return model, honest, config


def test_a_participating_attacker_and_a_server_observer(digits3):
    model, honest, config = _federation(digits3)
    attacker = ScalingAttacker(honest[2])
    recorder = Recorder()
    start = copy.deepcopy(model)
    FederatedSimulation(model, [*honest[:2], attacker], config, observers=[recorder], seed=0).run(2)
    assert [e[0] for e in recorder.events] == ["start", "update", "update", "update", "end"] * 2
    assert [e[2] for e in recorder.events if e[0] == "update"] == [0, 1, 2, 0, 1, 2]
    assert torch.equal(recorder.events[0][2], start.classifier.bias)
    assert len(attacker.received) == 2 and attacker.received[0] is not model  # its own copy
    assert torch.equal(attacker.received[1].classifier.bias, recorder.events[4][2])  # sent = last result


def test_the_median_bounds_what_one_scaling_attacker_moves(digits3):
    """One of three participants scales its update by 100: the weighted mean follows it, the
    coordinate-wise median stays within the honest updates' spread (Yin et al., ICML 2018)."""
    drift = {}
    for aggregator in ("mean", "median"):
        model, honest, config = _federation(digits3, aggregator)
        start = copy.deepcopy(model)
        FederatedSimulation(model, [*honest[:2], ScalingAttacker(honest[2])], config, seed=0).run(1)
        clean = FederatedSimulation(start, honest, config, seed=0).run(1)
        drift[aggregator] = float((model.classifier.weight - clean.classifier.weight).abs().max().detach())
    assert drift["median"] < drift["mean"] / 10, drift


def test_aggregators_are_registered_and_validated(digits3):
    assert {"mean", "median"} <= set(AGGREGATORS.names())
    with pytest.raises(Exception, match="unknown aggregator 'avg'"):
        FLConfig(aggregator="avg")
    model, honest, _ = _federation(digits3)
    updates = [c.fit(model, 0) for c in honest]
    mean = create_aggregator("mean").combine(updates)
    weights = [u.protocol.num_samples for u in updates]
    manual = sum(w * u.delta["classifier.bias"] for w, u in zip(weights, updates, strict=True)) / sum(weights)
    assert torch.allclose(mean["classifier.bias"], manual, atol=1e-7)
    median = create_aggregator("median").combine(updates)
    stacked = torch.stack([u.delta["classifier.bias"] for u in updates])
    assert torch.equal(median["classifier.bias"], stacked.median(dim=0).values)
