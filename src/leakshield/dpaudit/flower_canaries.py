"""The canary audit in a Flower federation (flwr ≥ 1.41, the ``flower`` extra).

Canary clients are nodes: :class:`CanaryMod`, a client mod, turns every node whose ``partition-id`` is
at least ``first`` into canary i = partition-id − first. Such a node trains nothing: it replies to a
train message with the arrays it was sent plus S·c_i (S the clipping norm the server sent, with Flower's
client-side clipping, else the mod's ``clip``) if the canary's coin included it, and with an update of
norm 10⁻³·S in another random direction if not (a zero update would do, but Flower 1.41's clipping
divides by the update's norm and fails on it, and a much smaller one is lost to float32 rounding).
Flower samples a fixed number of nodes, so the two hypotheses are, to 0.1 % of the sensitivity,
zero-out neighbours (a client's update against a zero one; Kairouz et al. 2021), whose ε is at most the
replace-one ε Flower's fixed-size sampling is accounted under: a lower bound above the claimed ε refutes
that claim too.

:class:`CanaryRecorder` is the server's ``evaluate_fn`` (``strategy.start(..., evaluate_fn=recorder)``):
from the global arrays after each round it records the cosine of the round's change with every canary
direction; :meth:`CanaryRecorder.audit` then reads the estimate, the lower bound and the verdict exactly
as :func:`leakshield.dpaudit.audit.audit_scores` does for leakshield's own federation."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp.typing import ClientAppCallable

from leakshield.crossdevice.canary_clients import CanaryClients
from leakshield.dpaudit.audit import AuditSettings, DPAudit, audit_scores

#: the norm of an excluded canary's update, relative to the bound: Flower 1.41's clipping divides by the
#: update's norm, so a zero update stops the round with ZeroDivisionError, and one much smaller than this
#: vanishes when float32 weights of order 1 are rounded
EXCLUDED_NORM = 1e-3
#: the config key under which Flower's client-side clipping strategies send the clipping norm
CLIPPING_NORM_KEY = "clipping_norm"


def _vector(arrays: ArrayRecord) -> np.ndarray:
    return np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in arrays.to_numpy_ndarrays()])


class CanaryMod:
    """Client mod: nodes with ``partition-id`` ≥ ``first`` are canaries (see the module docstring);
    ``examples``: the ``num-examples`` a canary reports (the real clients' count, so FedAvg weighs it as
    one of them)."""

    def __init__(self, canaries: CanaryClients, first: int, clip: float, examples: int = 1) -> None:
        if clip <= 0 or examples <= 0:
            raise ValueError(f"CanaryMod: clip {clip} and examples {examples} must be > 0")
        self.canaries, self.first, self.clip, self.examples = canaries, first, clip, examples

    def __call__(self, msg: Message, ctxt: Context, call_next: ClientAppCallable) -> Message:
        node = int(ctxt.node_config.get("partition-id", -1))
        if msg.metadata.message_type != MessageType.TRAIN or node < self.first:
            return call_next(msg, ctxt)
        i = node - self.first
        if i >= self.canaries.count:
            raise ValueError(f"CanaryMod: partition {node} is canary {i}; only {self.canaries.count} drawn")
        key, sent = next(iter(msg.content.array_records.items()))
        config = next(iter(msg.content.config_records.values()), {})
        bound = float(config.get(CLIPPING_NORM_KEY, self.clip))
        if bool(self.canaries.included[i]):
            step = self.canaries.directions[i].double().numpy() * bound
        else:  # a zero update crashes Flower 1.41's clipping (it divides by the norm): 1e-3 of the bound
            other = np.random.default_rng(i).standard_normal(self.canaries.directions.shape[1])
            step = other / np.linalg.norm(other) * bound * EXCLUDED_NORM
        arrays, start = {}, 0
        for name, a in zip(sent.keys(), sent.to_numpy_ndarrays(), strict=True):
            arrays[name] = Array((a + step[start : start + a.size].reshape(a.shape)).astype(a.dtype))
            start += a.size
        if start != len(step):
            raise ValueError(f"CanaryMod: the model has {start} entries, the canaries {len(step)}")
        content = RecordDict(
            {key: ArrayRecord(arrays), "metrics": MetricRecord({"num-examples": self.examples})}
        )
        return Message(content, reply_to=msg)


class CanaryRecorder:
    """The server's ``evaluate_fn``: the cosine of each round's change of the global arrays with every
    canary direction, and of the whole change since round 0."""

    def __init__(self, canaries: CanaryClients) -> None:
        self.canaries = canaries
        self.per_round: list[np.ndarray] = []
        self.first: np.ndarray | None = None
        self.last: np.ndarray | None = None

    def __call__(self, server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        v = _vector(arrays)
        if self.first is None:
            self.first = v
        else:
            assert self.last is not None
            if not np.any(v != self.last):  # Flower keeps the arrays when no reply was aggregated
                raise ValueError(
                    f"CanaryRecorder: round {server_round} left the global model unchanged: no "
                    "reply was aggregated (see the ClientApps' errors); nothing to audit"
                )
            self.per_round.append(self.canaries.cosines(v - self.last))
        self.last = v
        return None

    def audit(self, delta: float, accountant: Callable[[int], float], claimed_epsilon: float | None = None,
              settings: AuditSettings | None = None, **info: Any) -> DPAudit:  # fmt: skip
        """The audit of the rounds recorded; ``accountant(t)``: ε of t rounds (∞ without noise)."""
        if not self.per_round or self.first is None or self.last is None:
            raise ValueError("CanaryRecorder: no round recorded; pass it as the strategy's evaluate_fn")
        audit = settings or AuditSettings(canaries=self.canaries.count)
        return audit_scores(self.per_round, self.canaries.cosines(self.last - self.first),
                            self.canaries.included.numpy(), delta, accountant, claimed_epsilon, audit,
                            accuracy=math.nan, settings=info)  # fmt: skip
