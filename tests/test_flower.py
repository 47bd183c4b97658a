"""The Flower bridge: records, mods, the train step, and a real Flower simulation with the audit
compared with leakshield's own simulation (skipped without the ``flower`` extra)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import yaml

flwr = pytest.importorskip(
    "flwr", reason="the Flower bridge needs the extra: pip install 'leakshield[flower]'"
)

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from leakshield.errors import ConfigError, LeakshieldError  # noqa: E402
from leakshield.experiment.audit import AuditSettings, UpdateAuditor, audit_sample  # noqa: E402
from leakshield.experiment.config import load_config  # noqa: E402
from leakshield.experiment.federation import Federation  # noqa: E402
from leakshield.experiment.store import ResultStore  # noqa: E402
from leakshield.fl import FederatedSimulation  # noqa: E402
from leakshield.flower import (  # noqa: E402
    FACTS_RECORD,
    ReleaseDefenseMod,
    ReportedFacts,
    SelfAuditMod,
    client_app,
    release_mods,
    reply_state,
    server_app,
    update_from_reply,
)
from leakshield.flower.apps import ConfiguredTrainStep  # noqa: E402
from leakshield.report import build_report  # noqa: E402

#: the attack of the comparison: Adam, not L-BFGS, whose line search turns float rounding into
#: visible PSNR differences. Its measured sensitivity to the wire's rounding: perturbing the update
#: by 5e-7 relative (8 draws) moved client 0's PSNR within 13.247–13.362 dB (range 0.115 dB) and
#: client 1's by < 1e-4 dB; the Flower run gave 13.362 / 13.366 against the simulation's 13.304 /
#: 13.366. The tolerance is twice that range.
PSNR_TOLERANCE = 0.25
CONFIG = {
    "name": "flower-bridge-test",
    "dataset": {"name": "digits"},
    "models": [{"name": "lenet"}],
    "fl": {"clients": 2, "local": {"algorithm": "fedsgd", "batch_size": 1, "local_lr": 0.1}},
    "defenses": [{"name": "gaussian-noise", "sigma": 0.001}],
    "attack": {"threat": {"labels_known": True}},
    "attacks": [
        {"name": "gradient-inversion", "optimizer": "adam", "lr": 0.1, "iterations": 200,
         "distance": "cosine", "labels": "known"}
    ],
}  # fmt: skip


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "bridge.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    return path


@pytest.fixture
def task_identity():
    """Flower stamps messages with the running task's identity; a unit test plays node 1 of run 1."""
    saved = (TaskIdentity._run_id, TaskIdentity._node_id, getattr(TaskIdentity, "_task_id", None))
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1
    yield
    TaskIdentity._run_id, TaskIdentity._node_id = saved[0], saved[1]
    if saved[2] is not None:
        TaskIdentity._task_id = saved[2]


def _train_message(arrays: ArrayRecord, server_round: int = 1) -> Message:
    content = RecordDict({"arrays": arrays, "config": ConfigRecord({"server-round": server_round})})
    return Message(content, dst_node_id=1, message_type=MessageType.TRAIN)


def _context(client: int) -> Context:
    return Context(
        run_id=1, node_id=1, node_config={"partition-id": client}, state=RecordDict(), run_config={}
    )


def test_reply_arrays_invert_to_the_update(config_path: Path) -> None:
    fed = Federation.build(load_config(config_path))
    model = fed.fresh_model()
    sent = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for algorithm in ("fedsgd", "fedavg"):
        client = fed.client(0)
        client = dataclasses.replace(client, local=client.local.model_copy(update={"algorithm": algorithm}))
        update = client.fit(fed.fresh_model(), 0)
        names = tuple(n for n, _ in model.named_parameters())
        facts = ReportedFacts(0, 0, update.protocol, "digits", fed.info.mean, fed.info.std, names, ())
        back = update_from_reply(sent, reply_state(sent, update), facts)
        for name, delta in update.delta.items():
            scale = delta.abs().max().item()
            # FedAvg's Δθ survives θ + Δθ − θ up to one rounding of θ; FedSGD's g also the division by lr
            assert (back.delta[name] - delta).abs().max().item() <= 1e-5 * max(scale, 1.0), (algorithm, name)


def test_facts_travel_in_a_config_record_and_mismatches_are_refused(config_path: Path, task_identity) -> None:
    fed = Federation.build(load_config(config_path))
    update = fed.client(1).fit(fed.fresh_model(), 0)
    facts = ReportedFacts(1, 0, update.protocol, "digits", fed.info.mean, fed.info.std, ("a",),
                          fed.pipeline.public_config())  # fmt: skip
    message = Message(RecordDict({FACTS_RECORD: facts.to_record()}), dst_node_id=1, message_type="train")
    assert ReportedFacts.from_message(message) == facts
    facts.check_against(fed.info)
    other = dataclasses.replace(facts, mean=(0.5,))
    with pytest.raises(LeakshieldError, match="normalized its inputs as digits"):
        other.check_against(fed.info)
    with pytest.raises(LeakshieldError, match="no 'leakshield' ConfigRecord"):
        ReportedFacts.from_message(Message(RecordDict({}), dst_node_id=1, message_type="train"))


def test_only_update_stage_defenses_become_mods() -> None:
    with pytest.raises(ConfigError, match="not an update-stage defense"):
        ReleaseDefenseMod("soteria")
    stack = [{"name": "mixup", "params": {}}, {"name": "clipping", "params": {"bound": 1.0}},
             {"name": "gaussian-noise", "params": {"sigma": 0.1}}]  # fmt: skip
    mods = release_mods(stack)
    # listed outermost first: noise (applied last) wraps clipping (applied first), mixup stays inside
    assert [m.defense.name for m in mods] == ["gaussian-noise", "clipping"]
    assert release_mods(stack[:1]) == []


def test_flower_train_step_with_a_mod_releases_the_simulation_update(
    config_path: Path, task_identity
) -> None:
    """The client side alone: the train step plus the noise mod reply with the update leakshield's
    in-process client computes (same batch, same noise draws), up to the wire's float rounding."""
    config = load_config(config_path)
    fed = Federation.build(config)
    sent = ArrayRecord(fed.fresh_model().state_dict())
    step = ConfiguredTrainStep(config_path)
    for client in (0, 1):
        reply = step(_train_message(sent), _context(client))
        facts = ReportedFacts.from_message(reply)
        assert facts.client_id == client and facts.round == 0
        assert facts.defenses == fed.pipeline.public_config()
        state = {k: v for k, v in reply.content["arrays"].to_torch_state_dict().items()}
        received = update_from_reply(sent.to_torch_state_dict(), state, facts)
        expected = fed.client(client).fit(fed.fresh_model(), 0)
        for name, delta in expected.delta.items():
            assert (received.delta[name] - delta).abs().max().item() < 1e-5, (client, name)
        noiseless = dataclasses.replace(fed.client(client), pipeline=type(fed.pipeline)()).fit(
            fed.fresh_model(), 0
        )
        noise = torch.cat([(received.delta[k] - noiseless.delta[k]).flatten() for k in noiseless.delta])
        assert 0.0008 < noise.std().item() < 0.0012  # σ = 0.001, thousands of entries


def test_audit_sample_is_seeded_and_bounded() -> None:
    assert audit_sample(0, 3, [4, 1, 7, 2], 2) == audit_sample(0, 3, [7, 2, 4, 1], 2)
    assert len(audit_sample(0, 3, list(range(100)), 5)) == 5
    assert audit_sample(0, 3, [1, 2], 5) == [1, 2]


def test_flower_simulation_audit_matches_leakshield_simulation(
    config_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2 clients, 1 round in Flower's simulation engine (Ray) with the noise mod and the audit, against
    leakshield's own simulation with the same seeds: the same clients audited, the same PSNR within
    the attack's measured sensitivity to float rounding, and a run directory ``report`` reads."""
    from flwr.simulation import run_simulation

    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    flower_out, sim_out = tmp_path / "flower", tmp_path / "sim"
    server = server_app(config_path, defaults={"num-rounds": 1, "out": str(flower_out), "audit-clients": 2})
    run_simulation(
        server,
        client_app(config_path),
        num_supernodes=2,
        backend_config={"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": 2}},
    )
    config = load_config(config_path)
    fed = Federation.build(config)
    auditor = UpdateAuditor(config, sim_out, settings=AuditSettings(clients=2), federation=fed)
    FederatedSimulation.honest(
        fed.fresh_model(), fed.clients, config.fl, fed.pipeline, fed.info, public=fed.data.public,
        seed=fed.seed, observers=[auditor],
    ).run(1)  # fmt: skip
    flower = ResultStore(flower_out / "results.sqlite").records()
    simulated = ResultStore(sim_out / "results.sqlite").records()
    assert [r.status for r in flower] == ["ok"] and [r.status for r in simulated] == ["ok"], flower[0].error
    assert flower[0].key == simulated[0].key
    got = {v["client"]: v["psnr"][0] for v in flower[0].victims}
    want = {v["client"]: v["psnr"][0] for v in simulated[0].victims}
    assert sorted(got) == sorted(want) == [0, 1]
    for client in want:
        assert got[client] == pytest.approx(want[client], abs=PSNR_TOLERANCE), client
    files = build_report(flower_out)
    assert files.html.exists() and "Accuracy: not measured in this run." in files.markdown.read_text()


def test_self_audit_mod_adds_only_scores(config_path: Path, task_identity) -> None:
    """A deployed client's own audit: its reply gains PSNR/SSIM metrics, computed against its own
    batch, and nothing else."""
    step = ConfiguredTrainStep(config_path)
    sent = ArrayRecord(Federation.build(load_config(config_path)).fresh_model().state_dict())
    plain = step(_train_message(sent), _context(1))
    audit = SelfAuditMod(step.trainer(_context(1)), iterations=5)
    reply = audit(_train_message(sent), _context(1), step)
    metrics = reply.content["metrics"]
    assert set(metrics) == {"num-examples", "leakshield-psnr", "leakshield-ssim"}
    assert 0 < metrics["leakshield-psnr"] < 100 and -1 <= metrics["leakshield-ssim"] <= 1
    assert set(reply.content) == set(plain.content)


def test_a_reply_without_facts_fails_the_audit_not_the_round(
    config_path: Path, tmp_path: Path, task_identity
) -> None:
    from flwr.app import MetricRecord
    from flwr.serverapp.strategy import FedAvg

    from leakshield.flower import AuditingStrategy

    config = load_config(config_path)
    auditor = UpdateAuditor(config, tmp_path / "audit", settings=AuditSettings(clients=2))
    strategy = AuditingStrategy(FedAvg(), auditor)
    state = auditor.federation.fresh_model().state_dict()
    sent = _train_message(ArrayRecord(state))
    strategy._sent[(1, 1)] = {k: v.clone() for k, v in state.items()}
    bare = Message(
        RecordDict({"arrays": ArrayRecord(state), "metrics": MetricRecord({"num-examples": 1})}),
        reply_to=sent,
    )
    arrays, _ = strategy.aggregate_train(1, [bare])
    assert arrays is not None  # FedAvg still aggregated the round
    (record,) = ResultStore(tmp_path / "audit" / "results.sqlite").records()
    assert record.status == "failed" and "no 'leakshield' ConfigRecord" in record.error


def test_the_guard_mod_refuses_a_changed_architecture_and_a_guarded_layout(
    tmp_path: Path, task_identity
) -> None:
    """The guard stage as a Flower mod ahead of the train step: the imprint attack's model (an extra
    block: not the agreed architecture) and a model of the agreed architecture whose layer rows a
    server made identical are refused with an error reply (the train step never runs); the honest
    model passes through to the train step."""
    from leakshield.attacks import create_attack
    from leakshield.fl import ServerKnowledge
    from leakshield.flower import GuardMod, LeakshieldTrainer

    config = {**CONFIG, "defenses": [{"name": "row-guard"}], "models": [{"name": "mlp", "width": 32}]}
    path = tmp_path / "guard.yaml"
    path.write_text(yaml.safe_dump(config))
    trainer = LeakshieldTrainer(path)
    fed = trainer.federation(0, 0)
    honest = fed.fresh_model()
    reached: list[int] = []

    def train_step(msg: Message, ctxt: Context) -> Message:
        reached.append(partition_of(ctxt))
        return trainer(msg, ctxt)

    def partition_of(ctxt: Context) -> int:
        return int(ctxt.node_config["partition-id"])

    guard = GuardMod(trainer)
    imprinted = create_attack("imprint", {"bins": 8}).prepare_model(
        honest, ServerKnowledge(fed.info, fed.data.public)
    )
    reply = guard(_train_message(ArrayRecord(imprinted.model.state_dict())), _context(0), train_step)
    assert reply.has_error() and "not the agreed architecture" in reply.error.reason and reached == []
    flattened = fed.fresh_model()
    with torch.no_grad():
        first = next(m for m in flattened.modules() if isinstance(m, torch.nn.Linear))
        first.weight.copy_(first.weight[:1].expand_as(first.weight))
    reply = guard(_train_message(ArrayRecord(flattened.state_dict())), _context(1), train_step)
    assert reply.has_error() and "near-duplicates" in reply.error.reason and reached == []
    assert [(r, c) for r, c, _ in guard.refusals] == [(0, 0), (0, 1)]
    reply = guard(_train_message(ArrayRecord(honest.state_dict())), _context(0), train_step)
    assert not reply.has_error() and reached == [0]


def test_the_guard_mod_hands_drift_guard_the_model_each_client_accepted(
    tmp_path: Path, task_identity
) -> None:
    """drift-guard through Flower: the train step's guard mod remembers, per client, the last model it
    accepted, so a rewritten first layer next round is refused; a client that has accepted nothing yet
    has nothing to compare with and accepts."""
    from leakshield.attacks import create_attack
    from leakshield.fl import ServerKnowledge

    config = {**CONFIG, "defenses": [{"name": "drift-guard"}], "models": [{"name": "mlp", "width": 32}]}
    path = tmp_path / "drift.yaml"
    path.write_text(yaml.safe_dump(config))
    step = ConfiguredTrainStep(path)
    fed = Federation.build(load_config(path))
    honest = fed.fresh_model()
    trap = create_attack("trap-weights", {}).prepare_model(honest, ServerKnowledge(fed.info, fed.data.public))
    first = step(_train_message(ArrayRecord(honest.state_dict()), 1), _context(0))
    assert not first.has_error()
    second = step(_train_message(ArrayRecord(trap.model.state_dict()), 2), _context(0))
    assert second.has_error() and "drift-guard" in second.error.reason
    unseen = step(_train_message(ArrayRecord(trap.model.state_dict()), 2), _context(1))
    assert not unseen.has_error()  # client 1 accepted nothing before: no reference
