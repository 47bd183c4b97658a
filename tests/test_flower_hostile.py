"""The Flower bridge under hostile input (skipped without the ``flower`` extra): the auditing strategy
drops a malformed reply, stores why and aggregates the rest; the guard mod checks dtypes, answers a
message it cannot place with an error reply, and refuses a stack without a guard or with one twice;
random shapes, dtypes and non-finite values never raise out of either."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

flwr = pytest.importorskip(
    "flwr", reason="the Flower bridge needs the extra: pip install 'leakshield[flower]'"
)

from flwr.app import ArrayRecord, Context, Message, RecordDict  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402
from test_flower import CONFIG, _context, _train_message, task_identity  # noqa: E402, F401

from leakshield.errors import ConfigError  # noqa: E402
from leakshield.experiment.audit import AuditSettings, UpdateAuditor  # noqa: E402
from leakshield.experiment.config import load_config  # noqa: E402
from leakshield.experiment.store import ResultStore  # noqa: E402
from leakshield.flower import AuditingStrategy, GuardMod, LeakshieldTrainer  # noqa: E402
from leakshield.flower.apps import ConfiguredTrainStep  # noqa: E402

pytestmark = pytest.mark.usefixtures("task_identity")  # messages carry the running task's identity
GUARDED = {**CONFIG, "defenses": [{"name": "row-guard"}], "models": [{"name": "mlp", "width": 32}]}


def write(tmp_path: Path, config: dict) -> Path:
    path = tmp_path / f"{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def honest_replies(path: Path) -> tuple[dict[str, torch.Tensor], list[Message]]:
    """The model sent and both clients' honest replies to it."""
    step = ConfiguredTrainStep(path)
    state = step.trainer(_context(0)).federation(0, 0).fresh_model().state_dict()
    replies = [step(_train_message(ArrayRecord(state)), _context(c)) for c in (0, 1)]
    return state, replies


_FEDERATIONS: dict[str, tuple] = {}


def federation(tmp_path_factory, config: dict) -> tuple[Path, dict[str, torch.Tensor], list[Message]]:
    """``config``'s file, the model sent and both clients' honest replies, set up once per config for
    the tests that only alter a reply (call it in a test body: a task identity must be set)."""
    name = json.dumps(config, sort_keys=True)
    if name not in _FEDERATIONS:
        path = write(tmp_path_factory.mktemp("federation"), config)
        _FEDERATIONS[name] = (path, *honest_replies(path))
    return _FEDERATIONS[name]


def replaced(reply: Message, key: str, value: torch.Tensor) -> Message:
    """``reply`` with the array ``key`` replaced (the facts and metrics kept)."""
    arrays = next(iter(reply.content.array_records.values())).to_torch_state_dict()
    arrays[key] = value
    records = {**reply.content.config_records, **reply.content.metric_records, "arrays": ArrayRecord(arrays)}
    return Message(RecordDict(records), reply_to=_train_message(ArrayRecord(arrays)))


def strategy_for(path: Path, tmp_path: Path, state: dict[str, torch.Tensor]) -> AuditingStrategy:
    auditor = UpdateAuditor(load_config(path), tmp_path / "audit", settings=AuditSettings(clients=2))
    strategy = AuditingStrategy(FedAvg(), auditor)
    strategy._sent[(1, 1)] = {k: v.clone() for k, v in state.items()}
    return strategy


def test_a_wrong_shaped_array_is_dropped_recorded_and_the_rest_aggregated(tmp_path: Path) -> None:
    """The hostile tester's reply: one array under the right key with the wrong shape. It raised
    RuntimeError out of aggregate_train; now it is dropped (stored as the reason), the other reply is
    aggregated and audited."""
    path = write(tmp_path, CONFIG)
    state, (good, bad) = honest_replies(path)
    key = next(k for k, v in state.items() if v.dim() == 2)
    broken = replaced(bad, key, torch.zeros(2, 2))
    strategy = strategy_for(path, tmp_path, state)
    arrays, _ = strategy.aggregate_train(1, [good, broken])
    assert arrays is not None
    aggregated = arrays.to_torch_state_dict()
    mine = next(iter(good.content.array_records.values())).to_torch_state_dict()
    assert torch.equal(aggregated[key], mine[key])  # the good reply alone
    ((round_, _, reason),) = strategy.dropped
    assert round_ == 1 and key in reason and "(2, 2)" in reason
    (record,) = ResultStore(tmp_path / "audit" / "results.sqlite").records()
    assert record.status == "ok" and [v["client"] for v in record.victims] == [0]


def test_a_round_of_only_malformed_replies_is_a_failed_audit_with_the_reasons(tmp_path: Path) -> None:
    path = write(tmp_path, CONFIG)
    state, (good, _) = honest_replies(path)
    key = next(iter(state))
    nan = replaced(good, key, torch.full_like(state[key], math.nan))
    strategy = strategy_for(path, tmp_path, state)
    arrays, _ = strategy.aggregate_train(1, [nan])
    assert arrays is None  # nothing sound to aggregate, and no exception
    (record,) = ResultStore(tmp_path / "audit" / "results.sqlite").records()
    assert record.status == "failed" and "non-finite" in record.error and key in record.error


def rebuilt(reply: Message, sent: dict, drop: str = "", **records) -> Message:
    """A reply to ``sent`` with ``reply``'s records, ``drop`` left out and ``records`` put in."""
    content = {**reply.content.config_records, **reply.content.metric_records, **reply.content.array_records}
    content = {k: v for k, v in content.items() if k != drop} | records
    return Message(RecordDict(content), reply_to=_train_message(ArrayRecord(sent)))


def with_metrics(reply: Message, metrics: dict) -> Message:
    """``reply`` with its MetricRecord's content replaced (its arrays and facts kept)."""
    from flwr.app import MetricRecord

    arrays = next(iter(reply.content.array_records.values()))
    records = {**reply.content.config_records, "metrics": MetricRecord(metrics), "arrays": arrays}
    return Message(RecordDict(records), reply_to=_train_message(arrays))


@pytest.mark.parametrize(
    "change",
    [
        "no count",
        "nan count",
        "zero count",
        "huge count",
        "inflated count",
        "renamed arrays",
        "string arrays",
        "unknown client",
    ],
)
def test_replies_a_strategy_cannot_aggregate_are_dropped_and_written_down(
    tmp_path: Path, tmp_path_factory, change
) -> None:
    """Each would stop FedAvg (its consistency checks raise) or poison the aggregate (a NaN weight), or
    (an unknown client id) lose the whole round's audit; now it is dropped or left unaudited, the rest
    aggregated, and the reason written to the run directory."""
    import numpy as np
    from flwr.app import Array, ConfigRecord

    path, state, (good, other) = federation(tmp_path_factory, CONFIG)
    count = next(iter(other.content.metric_records.values()))["num-examples"]
    arrays = next(iter(other.content.array_records.values()))
    facts = ConfigRecord({**other.content["leakshield"], "client-id": 7})
    bad = {
        "no count": lambda: with_metrics(other, {"something": 1}),
        "nan count": lambda: with_metrics(other, {"num-examples": math.nan}),
        "zero count": lambda: with_metrics(other, {"num-examples": 0}),
        # finite and positive, yet it alone would become the global model (accuracy 0.084 in the probe)
        "huge count": lambda: with_metrics(other, {"num-examples": 1e308}),
        "inflated count": lambda: with_metrics(other, {"num-examples": count * 1000}),  # > any shard
        "renamed arrays": lambda: rebuilt(other, state, drop="arrays", model=arrays),
        "string arrays": lambda: rebuilt(other, state, arrays=ArrayRecord({"w": Array(np.array(["a"]))})),
        "unknown client": lambda: rebuilt(other, state, leakshield=facts),
    }[change]()  # fmt: skip
    strategy = strategy_for(path, tmp_path, state)
    arrays, _ = strategy.aggregate_train(1, [good, bad])
    assert arrays is not None and count > 0
    ((_, _, reason),) = strategy.dropped
    written = [
        json.loads(line) for line in (tmp_path / "audit" / "dropped_replies.jsonl").read_text().splitlines()
    ]
    assert [w["reason"] for w in written] == [reason] and written[0]["round"] == 0
    (record,) = ResultStore(tmp_path / "audit" / "results.sqlite").records()
    assert record.status == "ok" and [v["client"] for v in record.victims] == [0]  # the sound reply audited
    if change == "unknown client":
        assert reason.startswith("not audited") and "client-id 7" in reason
    if change in ("huge count", "inflated count"):
        assert "more than a client can hold" in reason


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64, torch.int64])
def test_the_guard_mod_refuses_other_dtypes_than_the_agreed_ones(tmp_path: Path, dtype) -> None:
    trainer = LeakshieldTrainer(write(tmp_path, GUARDED))
    state = trainer.federation(0, 0).fresh_model().state_dict()
    key = next(k for k, v in state.items() if v.dim() == 2)
    state[key] = state[key].to(dtype)
    reply = GuardMod(trainer)(_train_message(ArrayRecord(state)), _context(0), lambda m, c: pytest.fail())
    assert reply.has_error() and "dtypes" in reply.error.reason and str(dtype) in reply.error.reason


def test_a_malformed_server_round_or_partition_gets_an_error_reply_from_the_app(tmp_path: Path) -> None:
    from flwr.app import ConfigRecord, MessageType

    path = write(tmp_path, GUARDED)
    step = ConfiguredTrainStep(path)
    state = LeakshieldTrainer(path).federation(0, 0).fresh_model().state_dict()
    content = RecordDict({"arrays": ArrayRecord(state), "config": ConfigRecord({"server-round": "one"})})
    reply = step(Message(content, dst_node_id=1, message_type=MessageType.TRAIN), _context(0))
    assert reply.has_error() and "server-round" in reply.error.reason
    odd = Context(run_id=1, node_id=1, node_config={"partition-id": "x"}, state=RecordDict(), run_config={})
    reply = step(_train_message(ArrayRecord(state)), odd)
    assert reply.has_error() and "partition-id" in reply.error.reason


@pytest.mark.parametrize("partition", [7, -1, "x"])
def test_an_unknown_partition_gets_an_error_reply(tmp_path: Path, partition) -> None:
    trainer = LeakshieldTrainer(write(tmp_path, GUARDED))
    state = trainer.federation(0, 0).fresh_model().state_dict()
    context = Context(run_id=1, node_id=1, node_config={"partition-id": partition}, state=RecordDict(),
                      run_config={})  # fmt: skip
    reply = GuardMod(trainer)(_train_message(ArrayRecord(state)), context, lambda m, c: pytest.fail())
    assert reply.has_error() and "partition-id" in reply.error.reason


@pytest.mark.parametrize(
    ("defenses", "message"),
    [
        ([{"name": "gaussian-noise", "sigma": 0.01}], "has no client guard"),
        (
            [{"label": "twice", "stack": ["row-guard", {"name": "row-guard", "similarity": 0.9}]}],
            "more than once",
        ),
    ],
)
def test_a_guard_mod_needs_a_guard_and_each_once(tmp_path: Path, defenses, message) -> None:
    trainer = LeakshieldTrainer(write(tmp_path, {**GUARDED, "defenses": defenses}))
    with pytest.raises(ConfigError, match=message):
        GuardMod(trainer)


ARRAYS = st.tuples(
    st.sampled_from([torch.float32, torch.float16, torch.float64, torch.int64, torch.bool, torch.complex64]),
    st.lists(st.integers(1, 4), min_size=0, max_size=3),  # a 0-dim array too
    st.sampled_from([0.0, 1.0, math.nan, math.inf]),
)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(
    changes=st.lists(st.tuples(st.integers(0, 20), ARRAYS), min_size=1, max_size=3),
    missing=st.booleans(),
)
def test_random_arrays_never_raise_out_of_the_guard_mod_or_the_strategy(tmp_path_factory, changes, missing):
    """Random dtypes, shapes (0-dim included) and values under the model's keys, and a key missing: the
    guard mod answers with an error reply, the strategy drops the reply and aggregates the sound one
    alone; nothing raises."""
    tmp_path = tmp_path_factory.mktemp("hostile")
    path, state, (good, _) = federation(tmp_path_factory, GUARDED)
    keys = sorted(state)
    hostile = dict(state)
    for index, (dtype, shape, fill) in changes:
        hostile[keys[index % len(keys)]] = torch.full(shape, fill).to(dtype)
    if missing:
        del hostile[keys[-1]]
    reply = GuardMod(LeakshieldTrainer(path))(
        _train_message(ArrayRecord(hostile)), _context(0), lambda m, c: m
    )
    assert reply.has_error()
    broken = rebuilt(good, state, arrays=ArrayRecord(hostile))
    strategy = strategy_for(path, tmp_path, state)
    arrays, _ = strategy.aggregate_train(1, [good, broken])
    assert len(strategy.dropped) == 1
    mine = next(iter(good.content.array_records.values())).to_torch_state_dict()
    assert all(torch.equal(v, mine[k]) for k, v in arrays.to_torch_state_dict().items())
