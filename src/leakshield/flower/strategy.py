"""The server side of the bridge: an auditing wrapper around any Flower strategy."""

from __future__ import annotations

import json
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
from leakshield.flower.reply_checks import WEIGHT_KEY, inconsistent, reply_problem

#: the run directory's record of the replies left out (one JSON object a line: round, node, reason)
DROPPED_FILE = "dropped_replies.jsonl"

_WARNING = 30


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

    The audit never stops training, and a malformed reply never reaches the inner strategy: a reply that
    is not sound (:mod:`~leakshield.flower.reply_checks`: arrays not those sent, non-finite values, no
    finite positive sample count at most the largest client's shard, records laid out otherwise than the
    round's others) is dropped from
    the aggregation and the audit; a sound reply whose protocol facts are missing or wrong is aggregated,
    not audited. Each is logged, kept in :attr:`dropped` and written to the run directory's
    ``dropped_replies.jsonl``; an audited round none of whose replies can be audited is stored as a
    failed audit with the reasons. The other replies reach the inner strategy unchanged."""

    def __init__(self, inner: Strategy, auditor: UpdateAuditor) -> None:
        self.inner = inner
        self.auditor = auditor
        self._sent: dict[tuple[int, int], dict[str, torch.Tensor]] = {}
        self._names: dict[tuple[int, int], str] = {}
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
        self._names = {k: v for k, v in self._names.items() if k[0] >= server_round}
        states: dict[int, dict[str, torch.Tensor]] = {}
        for message in messages:
            name, record = next(iter(message.content.array_records.items()))
            if id(record) not in states:  # strategies usually send one record to all
                states[id(record)] = state_of(record)
            self._sent[(server_round, message.metadata.dst_node_id)] = states[id(record)]
            self._names[(server_round, message.metadata.dst_node_id)] = name
        return messages

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        kept, arrays, reasons = [], [], []
        weight_key = getattr(self.inner, "weighted_by_key", WEIGHT_KEY)
        most = max(len(c) for c in self.auditor.federation.clients)  # the largest client's shard
        for reply in replies:
            if reply.has_error():
                kept.append(reply)  # a failed client: the inner strategy counts it
                continue
            where = (server_round, reply.metadata.src_node_id)
            sent, name = self._sent.get(where), self._names.get(where)
            problem, state = reply_problem(reply, sent, name, weight_key, most)
            if problem is not None:
                reasons.append(self._drop(server_round, where[1], problem))
            else:
                kept.append(reply)
                arrays.append((reply, state))
        for index, problem in reversed(inconsistent([r for r, _ in arrays])):
            reply, _ = arrays.pop(index)
            kept.remove(reply)
            reasons.append(self._drop(server_round, reply.metadata.src_node_id, problem))
        try:
            self._audit(server_round, arrays, reasons)
        except Exception as exc:  # the audit never stops training; the failure is stored
            log(_WARNING, "leakshield audit of round %d failed: %s", server_round, exc)
            self.auditor.record_failure(server_round - 1, " ".join(str(exc).split()))
        return self.inner.aggregate_train(server_round, kept)

    def _audit(self, server_round: int, arrays: list, reasons: list[str]) -> None:
        """Audit the sound replies whose protocol facts are usable (the others are dropped from it)."""
        updates: dict[int, ClientUpdate] = {}
        defenses: dict[int, tuple[PublicDefense, ...]] = {}
        sent_any: dict[str, torch.Tensor] | None = None
        clients = self.auditor.config.fl.clients
        for reply, state in arrays:
            node = reply.metadata.src_node_id
            sent = self._sent[(server_round, node)]
            try:
                facts = ReportedFacts.from_message(reply)
                facts.check_against(self.auditor.federation.info)
                if not 0 <= facts.client_id < clients:
                    raise LeakshieldError(f"client-id {facts.client_id} is not a client (0..{clients - 1})")
                updates[facts.client_id] = update_from_reply(sent, state, facts)
                defenses[facts.client_id] = facts.defenses
                sent_any = sent
            except Exception as exc:  # a reply without sound facts is aggregated, not audited
                reasons.append(self._drop(server_round, node, f"not audited: {' '.join(str(exc).split())}"))
        wanted = self.auditor.settings.rounds
        if sent_any is not None:
            self.auditor.audit(server_round - 1, self.auditor.model_as_sent(sent_any), updates, defenses)
        elif reasons and (wanted is None or server_round - 1 in wanted):
            raise LeakshieldError("; ".join(reasons))

    def _drop(self, server_round: int, node: int, reason: str) -> str:
        """Keep, log and write down why a reply of ``node`` was left out."""
        self.dropped.append((server_round, node, reason))
        log(_WARNING, "leakshield: round %d, the reply of node %d: %s", server_round, node, reason)
        line = {"round": server_round - 1, "node": node, "reason": reason}
        with (self.auditor.out / DROPPED_FILE).open("a") as handle:
            handle.write(json.dumps(line) + "\n")
        return f"node {node}: {reason}"

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return self.inner.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return self.inner.aggregate_evaluate(server_round, replies)
