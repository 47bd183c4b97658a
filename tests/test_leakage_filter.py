"""The client-side leakage filter: a client attacks its own update before sending it and acts only
where it leaks — on its own batch, in unit calls and in a real Flower simulation (skipped without the
``flower`` extra)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

flwr = pytest.importorskip(
    "flwr", reason="the Flower bridge needs the extra: pip install 'leakshield[flower]'"
)

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict  # noqa: E402
from test_flower import task_identity  # noqa: E402, F401  (the one fixture that plays a Flower task)

from leakshield.errors import ConfigError  # noqa: E402
from leakshield.experiment.config import load_config  # noqa: E402
from leakshield.experiment.federation import Federation  # noqa: E402
from leakshield.experiment.store import ResultStore  # noqa: E402
from leakshield.flower import (  # noqa: E402
    FACTS_RECORD,
    FILTER_LOG,
    LeakageFilterMod,
    LeakshieldTrainer,
    PerClientTrainer,
    ReportedFacts,
    server_app,
)
from leakshield.flower.leakage_filter import FilteredTrainStep, leakage  # noqa: E402
from leakshield.report import build_report  # noqa: E402

pytestmark = pytest.mark.usefixtures("task_identity")  # messages carry the running task's identity

#: LeNet on 16-px digits, FedSGD at batch 32; client 0 at batch 1 (iDLG recovers it: SSIM 1.000,
#: measured; at batch 32 its leak rate is 0, mean SSIM 0.21)
BASE = {
    "name": "filter-test",
    "dataset": {"name": "digits", "size": 16, "channels": 1},
    "models": [{"name": "lenet", "activation": "tanh", "init_range": None}],
    "fl": {"clients": 3, "local": {"algorithm": "fedsgd", "batch_size": 32, "local_lr": 0.1}},
    "defenses": ["none"],
    "attack": {"threat": {"labels_known": True}},
    "attacks": [{"name": "idlg", "iterations": 20}],
}
ONE = {**BASE, "fl": {**BASE["fl"], "local": {**BASE["fl"]["local"], "batch_size": 1}}}


@pytest.fixture(scope="module")
def configs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    where = tmp_path_factory.mktemp("filter")
    (where / "b32.yaml").write_text(yaml.safe_dump(BASE))
    (where / "b1.yaml").write_text(yaml.safe_dump(ONE))
    return where / "b32.yaml", where / "b1.yaml"


@pytest.fixture(scope="module")
def step(configs: tuple[Path, Path]) -> PerClientTrainer:
    b32, b1 = configs
    return PerClientTrainer({0: LeakshieldTrainer(b1)}, LeakshieldTrainer(b32))


@pytest.fixture(scope="module")
def sent(configs: tuple[Path, Path]) -> ArrayRecord:
    return ArrayRecord(Federation.build(load_config(configs[0])).fresh_model().state_dict())


def send(
    mod: LeakageFilterMod, step: PerClientTrainer, sent: ArrayRecord, client: int, rnd: int = 1
) -> Message:
    msg = Message(RecordDict({"arrays": sent, "config": ConfigRecord({"server-round": rnd})}),
                  dst_node_id=1, message_type=MessageType.TRAIN)  # fmt: skip
    context = Context(run_id=1, node_id=1, node_config={"partition-id": client}, state=RecordDict(),
                      run_config={})  # fmt: skip
    return mod(msg, context, step)


def test_the_filter_defends_the_leaking_client_only_and_logs_every_decision(
    step: PerClientTrainer, sent: ArrayRecord, tmp_path: Path
) -> None:
    mod = LeakageFilterMod(step, out=tmp_path, secret=0)
    plain = {c: step(*_plain(sent, c)) for c in (0, 1)}
    replies = {c: send(mod, step, sent, c) for c in (0, 1)}
    first, second = mod.decisions
    assert first["client"] == 0 and first["action"] == "defended"
    assert first["measured"]["leak_rate"] == 1.0 and first["released"]["leak_rate"] == 0.0
    assert second["client"] == 1 and second["action"] == "sent" and second["measured"]["leak_rate"] == 0.0
    logged = [json.loads(line) for line in (tmp_path / FILTER_LOG).read_text().splitlines()]
    assert logged == mod.decisions
    # the leaking client's arrays changed and its facts name the filter's defenses; the other's did not
    assert _arrays(replies[1]) == _arrays(plain[1]) and _arrays(replies[0]) != _arrays(plain[0])
    names = [d.name for d in ReportedFacts.from_message(replies[0]).defenses]
    assert names == ["none", "clipping", "gaussian-noise"]
    assert FACTS_RECORD in replies[1].content


def test_the_refuse_action_sends_an_error_and_the_threshold_decides(
    step: PerClientTrainer, sent: ArrayRecord
) -> None:
    refuse = LeakageFilterMod(step, action="refuse", secret=0)
    assert send(refuse, step, sent, 0).has_error() and refuse.decisions[-1]["action"] == "refused"
    measured = refuse.decisions[-1]["measured"]["ssim"]  # iDLG on client 0's single image: ≈ 1
    lenient = LeakageFilterMod(step, metric="ssim", threshold=measured - 0.01, secret=0)
    assert not send(lenient, step, sent, 0).has_error() and lenient.decisions[-1]["action"] == "defended"
    calm = LeakageFilterMod(step, metric="ssim", threshold=0.5, secret=0)
    send(calm, step, sent, 1)  # a batch of 32: mean SSIM about 0.2
    assert calm.decisions[-1]["action"] == "sent" and calm.decisions[-1]["measured"]["ssim"] < 0.5


def test_a_filter_that_cannot_check_sends_nothing(step: PerClientTrainer, sent: ArrayRecord) -> None:
    """An attack that cannot run on this model (trap weights needs a fully connected first layer): the
    client answers with an error, never the unchecked update."""
    broken = LeakageFilterMod(step, attack="analytic")  # no fully connected layer reads LeNet's image
    reply = send(broken, step, sent, 1)
    assert reply.has_error() and "leakage filter" in reply.error.reason
    assert broken.decisions[-1]["action"] == "refused (check failed)"
    two = Message(RecordDict({"a": sent, "b": sent, "config": ConfigRecord({"server-round": 1})}),
                  dst_node_id=1, message_type=MessageType.TRAIN)  # fmt: skip
    assert broken(two, _plain(sent, 1)[1], step).has_error()  # nothing it could check: refused


def test_settings_are_validated_in_one_line(step: PerClientTrainer) -> None:
    with pytest.raises(ConfigError, match="leakage filter: threshold"):
        LeakageFilterMod(step, threshold=1.5)
    with pytest.raises(ConfigError, match="soteria is not an update-stage defense"):
        LeakageFilterMod(step, defenses=[{"name": "soteria"}])
    with pytest.raises(ConfigError, match="action"):
        FilteredTrainStep("x.yaml", action="delete")
    with pytest.raises(ConfigError, match="soteria is not an update-stage defense"):
        FilteredTrainStep("x.yaml", defenses=[{"name": "soteria"}])  # found before any Ray actor starts
    with pytest.raises(ConfigError, match="imprint is not a passive attack"):
        LeakageFilterMod(step, attack="imprint")


def test_a_share_of_rounds_is_checked_by_a_seeded_draw(step: PerClientTrainer, sent: ArrayRecord) -> None:
    mod = LeakageFilterMod(step, share=0.5)
    for rnd in range(1, 9):
        send(mod, step, sent, 0, rnd)
    unchecked = [d["round"] for d in mod.decisions if d["action"] == "sent unchecked"]
    again = LeakageFilterMod(step, share=0.5)
    assert [again._checked(0, _facts(r)) for r in range(8)] == [r not in unchecked for r in range(8)]
    assert 0 < len(unchecked) < 8


def test_an_image_counts_as_reconstructed_only_above_its_own_no_information_score() -> None:
    found = leakage([0.95, 0.70, 0.65, 0.30], [0.20, 0.75, 0.30, 0.10], leak_ssim=0.6)
    assert found.leak_rate == 0.5 and found.ssim == pytest.approx(0.65)  # the 0.70 is below its 0.75 floor


def _plain(sent: ArrayRecord, client: int) -> tuple[Message, Context]:
    msg = Message(RecordDict({"arrays": sent, "config": ConfigRecord({"server-round": 1})}),
                  dst_node_id=1, message_type=MessageType.TRAIN)  # fmt: skip
    return msg, Context(run_id=1, node_id=1, node_config={"partition-id": client}, state=RecordDict(),
                        run_config={})  # fmt: skip


def _arrays(reply: Message) -> list[float]:
    arrays = next(iter(reply.content.array_records.values())).to_torch_state_dict()
    return [float(t.double().sum()) for t in arrays.values()]


def _facts(rnd: int):
    class Facts:
        round, client_id = rnd, 0

    return Facts


@pytest.mark.slow  # two Ray simulations (about 50 s); the how-to page runs the filtered one by default
def test_a_flower_simulation_filters_the_leaking_client_and_reports_accuracy(
    configs: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """3 clients, 2 rounds in Flower's simulation engine: client 0 at batch 1 (it leaks), the others at
    batch 32; with the filter, every (round, client) decided and logged, client 0 defended each round
    and no other touched; the federation's accuracy with and without the filter recorded."""
    from flwr.clientapp import ClientApp
    from flwr.simulation import run_simulation

    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    b32, b1 = configs
    accuracy = {}
    for name, filtered in (("filtered", True), ("plain", False)):
        out = tmp_path / name
        app = ClientApp()
        train = FilteredTrainStep(b32, per_client={0: b1}, out=out, secret=0) if filtered else None
        app.train()(train or PerClientTrainer({0: LeakshieldTrainer(b1)}, LeakshieldTrainer(b32)))
        audit = 3 if filtered else 0  # the server's own audit too: a run directory `report` reads
        server = server_app(b32, defaults={"num-rounds": 2, "out": str(out), "audit-clients": audit})
        resources = {"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": 2}}
        run_simulation(server, app, num_supernodes=3, backend_config=resources)
        accuracy[name] = json.loads((out / "accuracy.json").read_text())
    decisions = [json.loads(line) for line in (tmp_path / "filtered" / FILTER_LOG).read_text().splitlines()]
    assert sorted((d["round"], d["client"]) for d in decisions) == [(r, c) for r in (0, 1) for c in (0, 1, 2)]
    assert {(d["client"], d["action"]) for d in decisions} == {(0, "defended"), (1, "sent"), (2, "sent")}
    assert set(accuracy["filtered"]) == set(accuracy["plain"]) == {"0", "1", "2"}
    for r in ("1", "2"):  # client 0 holds 1 of 65 samples a round: its noise moves no prediction here
        assert accuracy["filtered"][r] == pytest.approx(accuracy["plain"][r], abs=0.02)
    print(f"accuracy with the filter {accuracy['filtered']}, without {accuracy['plain']}")
    # the server's audit rebuilds client 0's batch from its own config (32 images): refused, not misscored
    audits = ResultStore(tmp_path / "filtered" / "results.sqlite").records()
    assert audits and all(r.status == "failed" and "audit it with its own config" in r.error for r in audits)
    report = build_report(tmp_path / "filtered").markdown.read_text()
    assert "## Client leakage filter" in report and "the filter acted 2 times, on clients 0;" in report
