"""The server side of the bridge: an auditing wrapper around any Flower strategy."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from leakshield.defenses.base import PublicDefense
from leakshield.errors import LeakshieldError
from leakshield.experiment.audit import UpdateAuditor
from leakshield.fl import ClientUpdate
from leakshield.flower.records import ReportedFacts, state_of, update_from_reply

_WARNING = 30


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]


def reply_arrays(reply: Message, sent: dict[str, torch.Tensor] | None) -> dict[str, torch.Tensor]:
    """The reply's model as a state dict, checked against the arrays ``sent`` to its node (same keys,
    shapes and dtypes) and for non-finite values; raises LeakshieldError naming the first problem."""
    records = list(reply.content.array_records.values())
    if len(records) != 1:
        raise LeakshieldError(f"expected one ArrayRecord, got {len(records)}")
    state = state_of(records[0])
    if sent is not None:
        differ = sorted(set(sent) ^ set(state))
        if differ:
            raise LeakshieldError(f"keys differ from those sent: {differ[:3]}")
        for key, value in state.items():
            if value.shape != sent[key].shape or value.dtype != sent[key].dtype:
                raise LeakshieldError(f"{key!r} is {value.dtype} {tuple(value.shape)}, the model sent has "
                                      f"{sent[key].dtype} {tuple(sent[key].shape)}")  # fmt: skip
    for key, value in state.items():
        if (value.is_floating_point() or value.is_complex()) and not bool(value.isfinite().all()):
            raise LeakshieldError(f"{key!r} holds a non-finite value")
    return state


class AuditingStrategy(Strategy):
    """``inner`` (FedAvg or any :class:`flwr.serverapp.strategy.Strategy`) with a leakshield audit.

    ``configure_train`` records the arrays each node is sent; ``aggregate_train`` turns every valid
    reply into leakshield's update with the reply's protocol facts, lets ``auditor`` attack its seeded
    sample of them (:class:`~leakshield.experiment.audit.UpdateAuditor`: scores into the run
    directory's result store, ground truth rebuilt from the deterministic partitioner), then hands the
    replies to ``inner`` unchanged. Evaluation and the summary are the inner strategy's.

    Under secure aggregation (the config's ``fl.secure_aggregation``) the audit attacks the round's
    aggregate only, what a server behind Flower's ``SecAggPlusWorkflow`` receives: the bridge still
    sees the individual replies and forms their sample-weighted mean itself.

    The audit never stops training, and a malformed reply never reaches the inner strategy: a reply
    whose arrays are not those sent (keys, shapes, dtypes) or hold a non-finite value is dropped from
    the aggregation and the audit; a reply whose arrays are sound but whose protocol facts are missing
    or wrong is aggregated, not audited. Each is logged and kept in :attr:`dropped`; a round none of
    whose replies can be audited is stored as a failed audit with the reasons."""

    def __init__(self, inner: Strategy, auditor: UpdateAuditor) -> None:
        self.inner = inner
        self.auditor = auditor
        self._sent: dict[tuple[int, int], dict[str, torch.Tensor]] = {}
        #: (server round, node id, reason) of every reply left out of the audit (and, when its arrays
        #: were malformed, of the aggregation)
        self.dropped: list[tuple[int, int, str]] = []

    def summary(self) -> None:
        self.inner.summary()
        spec, settings = self.auditor.config.attacks[0], self.auditor.settings
        log(20, "\t└── leakshield audit: %s on %d client(s) a round → %s", spec.display, settings.clients,
            self.auditor.out)  # fmt: skip

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        messages = list(self.inner.configure_train(server_round, arrays, config, grid))
        self._sent = {k: v for k, v in self._sent.items() if k[0] >= server_round}
        states: dict[int, dict[str, torch.Tensor]] = {}
        for message in messages:
            record = next(iter(message.content.array_records.values()))
            if id(record) not in states:  # strategies usually send one record to all
                states[id(record)] = state_of(record)
            self._sent[(server_round, message.metadata.dst_node_id)] = states[id(record)]
        return messages

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        kept: list[Message] = []
        updates: dict[int, ClientUpdate] = {}
        defenses: dict[int, tuple[PublicDefense, ...]] = {}
        sent_any: dict[str, torch.Tensor] | None = None
        reasons: list[str] = []
        for reply in replies:
            if reply.has_error():
                kept.append(reply)  # a failed client: the inner strategy counts it
                continue
            node = reply.metadata.src_node_id
            sent = self._sent.get((server_round, node))
            try:
                arrays = reply_arrays(reply, sent)
            except Exception as exc:  # whatever a reply holds, it must not stop training
                reasons.append(self._drop(server_round, node, f"its arrays: {_one_line(exc)}"))
                continue
            kept.append(reply)
            try:
                facts = ReportedFacts.from_message(reply)
                facts.check_against(self.auditor.federation.info)
                if sent is None:
                    raise LeakshieldError("a reply to nothing sent")
                updates[facts.client_id] = update_from_reply(sent, arrays, facts)
                defenses[facts.client_id] = facts.defenses
                sent_any = sent
            except Exception as exc:  # a reply without sound facts is aggregated, not audited
                reasons.append(self._drop(server_round, node, f"not audited: {_one_line(exc)}"))
        try:
            if sent_any is not None:
                self.auditor.audit(server_round - 1, self.auditor.model_as_sent(sent_any), updates, defenses)
            elif reasons:
                raise LeakshieldError("; ".join(reasons))
        except Exception as exc:  # the audit never stops training; the failure is stored
            log(_WARNING, "leakshield audit of round %d failed: %s", server_round, _one_line(exc))
            self.auditor.record_failure(server_round - 1, _one_line(exc))
        return self.inner.aggregate_train(server_round, kept)

    def _drop(self, server_round: int, node: int, reason: str) -> str:
        self.dropped.append((server_round, node, reason))
        log(_WARNING, "leakshield: round %d, the reply of node %d: %s", server_round, node, reason)
        return f"node {node}: {reason}"

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return self.inner.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return self.inner.aggregate_evaluate(server_round, replies)
