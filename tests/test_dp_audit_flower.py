"""The canary audit in a real Flower federation (flwr 1.41's simulation engine): real nodes train the
cross-device MLP on their digits, canary nodes (``CanaryMod``) reply with a random direction at the
clipping norm or with nothing, Flower's ``DifferentialPrivacyServerSideFixedClipping`` clips and noises
the mean, and ``CanaryRecorder`` audits the global models. Without noise the claim is refuted; with the
noise the claim was computed for, the lower bound stays below it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

flwr = pytest.importorskip("flwr", reason="the Flower bridge needs pip install 'leakshield[flower]'")

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, FedAvg  # noqa: E402
from test_flower import task_identity  # noqa: E402, F401

from leakshield.crossdevice.accounting import gaussian_epsilon  # noqa: E402
from leakshield.crossdevice.canary_clients import CanaryClients  # noqa: E402
from leakshield.crossdevice.federation import CrossDeviceSettings, initial_model, local_updates  # noqa: E402
from leakshield.crossdevice.population import digit_population  # noqa: E402
from leakshield.dpaudit.audit import AuditSettings  # noqa: E402
from leakshield.dpaudit.flower_canaries import CanaryMod, CanaryRecorder  # noqa: E402

REAL, CANARIES, ROUNDS, CLIP, DELTA = 8, 200, 3, 0.5, 1e-5
SETTINGS = CrossDeviceSettings(local_lr=0.1, width=32, local_epochs=1, local_batch=5)


def federation(noise: float) -> CanaryRecorder:
    from flwr.simulation import run_simulation

    population = digit_population(REAL, 0.5, 0)
    start = initial_model(population, SETTINGS, 0)
    dim = sum(t.numel() for t in start.values())
    canaries = CanaryClients.draw(CANARIES, dim, seed=5)
    recorder = CanaryRecorder(canaries)

    client = ClientApp(mods=[CanaryMod(canaries, first=REAL, clip=CLIP)])

    @client.train()
    def train(msg: Message, context: Context) -> Message:
        node = int(context.node_config["partition-id"])
        params = {k: v.float() for k, v in msg.content["arrays"].to_torch_state_dict().items()}
        g = torch.Generator().manual_seed(node)
        update = local_updates(params, population, torch.tensor([node]), SETTINGS, g)
        trained = {k: params[k] + update[k][0] for k in params}
        content = RecordDict({"arrays": ArrayRecord(trained), "metrics": MetricRecord({"num-examples": 1})})
        return Message(content, reply_to=msg)

    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        inner = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_available_nodes=REAL + CANARIES)
        strategy = DifferentialPrivacyServerSideFixedClipping(inner, noise, CLIP, REAL + CANARIES)
        strategy.start(grid=grid, initial_arrays=ArrayRecord(start), num_rounds=ROUNDS, evaluate_fn=recorder)

    backend = {"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": 2}}
    run_simulation(server, client, num_supernodes=REAL + CANARIES, backend_config=backend)
    return recorder


def accountant(noise: float):
    """The Gaussian ε of t rounds of every node (no sampling: fraction 1), for a sensitivity of
    (1 + EXCLUDED_NORM)·S: an included canary's update against an excluded one's."""
    from leakshield.dpaudit.flower_canaries import EXCLUDED_NORM

    z = noise / (1 + EXCLUDED_NORM)
    return lambda t: gaussian_epsilon(z, t, DELTA, "add-remove") if noise > 0 else float("inf")


def _context(node: int) -> Context:
    return Context(
        run_id=0, node_id=node, node_config={"partition-id": node}, state=RecordDict(), run_config={}
    )


@pytest.mark.usefixtures("task_identity")  # messages carry the running task's identity
def test_canary_mod_replies_with_its_direction_or_almost_nothing_and_lets_real_nodes_train():
    from flwr.app import ConfigRecord, MessageType

    from leakshield.dpaudit.flower_canaries import EXCLUDED_NORM

    canaries = CanaryClients.draw(6, 12, seed=0)
    mod = CanaryMod(canaries, first=3, clip=0.5, examples=7)
    sent = ArrayRecord({"w": torch.zeros(3, 2), "b": torch.ones(6)})
    msg = Message(RecordDict({"arrays": sent, "config": ConfigRecord({"clipping_norm": 2.0})}), dst_node_id=1,
                  message_type=MessageType.TRAIN)  # fmt: skip
    assert mod(msg, _context(1), lambda m, c: "trained") == "trained"
    for i in range(6):
        reply = mod(msg, _context(3 + i), lambda m, c: pytest.fail("a canary trained"))
        got = reply.content["arrays"].to_torch_state_dict()
        step = torch.cat([got["w"].flatten(), got["b"].flatten() - 1])
        assert float(reply.content["metrics"]["num-examples"]) == 7
        if bool(canaries.included[i]):  # the server's clipping norm (2.0), not the mod's own
            assert torch.allclose(step, 2.0 * canaries.directions[i], atol=1e-6)
        else:
            assert float(step.norm()) == pytest.approx(2.0 * EXCLUDED_NORM, rel=1e-4)
    with pytest.raises(ValueError, match="only 6 drawn"):
        mod(msg, _context(9), lambda m, c: None)


def test_canary_recorder_reads_round_changes_and_refuses_a_round_that_changed_nothing():
    canaries = CanaryClients.draw(4, 3, seed=1)
    rec = CanaryRecorder(canaries)
    rec(0, ArrayRecord({"w": torch.zeros(3)}))
    rec(1, ArrayRecord({"w": canaries.directions[2].clone()}))
    rec(2, ArrayRecord({"w": canaries.directions[2] + canaries.directions[3]}))
    assert rec.per_round[0][2] == pytest.approx(1.0, abs=1e-6)
    assert rec.per_round[1][3] == pytest.approx(1.0, abs=1e-6)  # the round's change, not the run's
    with pytest.raises(ValueError, match="unchanged"):
        rec(3, ArrayRecord({"w": canaries.directions[2] + canaries.directions[3]}))


@pytest.mark.slow  # two simulations of 208 nodes: 41–50 s on 2 cores
def test_flower_federation_without_noise_is_refuted_and_with_noise_is_consistent(monkeypatch):
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    settings = AuditSettings(canaries=CANARIES, resamples=200)
    bare = federation(0.0)
    assert len(bare.per_round) == ROUNDS
    refuted = bare.audit(DELTA, accountant(0.0), claimed_epsilon=1.0, settings=settings)
    assert refuted.verdict == "refuted", refuted.reason
    z = 4.0
    claim = accountant(z)(ROUNDS)
    noised = federation(z).audit(DELTA, accountant(z), settings=settings)
    assert noised.claimed_epsilon == pytest.approx(claim)
    assert noised.verdict in ("consistent", "suspect"), noised.reason
    assert all(
        r.lower_bound.epsilon <= r.accountant for r in (noised.final, noised.all_rounds, *noised.rounds)
    )
    # the canaries were read: without noise the inserted ones stand out in every round
    x = np.array(refuted.scores["all rounds"]["in"])
    y = np.array(refuted.scores["all rounds"]["out"])
    assert x.mean() > y.mean() + 4 * y.std()
