"""What a leakshield client's Flower reply carries besides its arrays: the protocol facts an attacker's
:class:`~leakshield.fl.ServerView` needs (algorithm, local lr, steps, batch size, model mode, the
dataset's normalization, which arrays are parameters, the defenses' public configuration), in one
:class:`flwr.app.ConfigRecord` under :data:`FACTS_RECORD`. A server that inverts a Flower update with
guessed facts (another normalization, BatchNorm in the wrong mode, buffers taken for parameters)
attacks a different computation than the client's; with these facts it needs no guess.

The arrays themselves stay Flower's convention: the reply holds the client's model after local
training (every entry of its ``state_dict``), so any strategy aggregates them unchanged. The update
leakshield attacks follows from the model sent and the reply: FedAvg Δθ = θ_reply − θ_sent; FedSGD
g = (θ_sent − θ_reply) / lr."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message

from leakshield.data.types import DatasetInfo
from leakshield.defenses.base import PublicDefense, create_defense
from leakshield.errors import LeakshieldError
from leakshield.fl import ClientUpdate, ProtocolFacts

#: the name of the reply's ConfigRecord holding the protocol facts
FACTS_RECORD = "leakshield"


@dataclass(frozen=True)
class ReportedFacts:
    """A reply's facts: who (``client_id``: the partition id) and when (``round``, 0-based), how
    (``protocol``), on what input scaling (``dataset``, ``mean``, ``std``), which array keys are
    parameters (the rest are buffers), and the ``defenses`` the client applied (public config)."""

    client_id: int
    round: int
    protocol: ProtocolFacts
    dataset: str
    mean: tuple[float, ...]
    std: tuple[float, ...]
    parameters: tuple[str, ...]
    defenses: tuple[PublicDefense, ...]

    def to_record(self) -> ConfigRecord:
        p = self.protocol
        return ConfigRecord(
            {
                "client-id": self.client_id,
                "round": self.round,
                "algorithm": p.algorithm,
                "local-lr": float(p.local_lr),
                "momentum": float(p.momentum),
                "local-epochs": p.local_epochs,
                "local-steps": p.local_steps,
                "batch-size": p.batch_size,
                "num-samples": p.num_samples,
                "model-mode": p.model_mode,
                "shuffled": p.shuffled,
                "optimizer": p.optimizer,
                "dataset": self.dataset,
                "mean": [float(v) for v in self.mean],
                "std": [float(v) for v in self.std],
                "parameters": list(self.parameters),
                "defenses": defenses_json(self.defenses),
            }
        )

    @classmethod
    def from_message(cls, message: Message) -> ReportedFacts:
        """The facts of a reply; a one-line error naming what is missing if it carries none."""
        if FACTS_RECORD not in message.content.config_records:
            raise LeakshieldError(
                f"the reply carries no '{FACTS_RECORD}' ConfigRecord: train with "
                "leakshield.flower.LeakshieldTrainer, or attach ReportedFacts(...).to_record() yourself"
            )
        return cls.from_mapping(message.content.config_records[FACTS_RECORD])

    def to_json(self) -> str:
        """The facts as one JSON string (a legacy ``FitRes`` metric, which holds scalars only)."""
        return json.dumps(dict(self.to_record()))

    @classmethod
    def from_json(cls, text: str) -> ReportedFacts:
        """The facts of :meth:`to_json`."""
        return cls.from_mapping(json.loads(text))

    @classmethod
    def from_mapping(cls, r: Mapping[str, Any]) -> ReportedFacts:
        """The facts of a record's (or a decoded JSON object's) fields."""
        try:
            protocol = ProtocolFacts(
                algorithm=str(r["algorithm"]),  # type: ignore[arg-type]
                local_lr=float(r["local-lr"]),  # type: ignore[arg-type]
                momentum=float(r["momentum"]),  # type: ignore[arg-type]
                local_epochs=int(r["local-epochs"]),  # type: ignore[arg-type]
                local_steps=int(r["local-steps"]),  # type: ignore[arg-type]
                batch_size=int(r["batch-size"]),  # type: ignore[arg-type]
                num_samples=int(r["num-samples"]),  # type: ignore[arg-type]
                model_mode=str(r["model-mode"]),  # type: ignore[arg-type]
                shuffled=bool(r["shuffled"]),
                optimizer=str(r.get("optimizer", "sgd")),  # type: ignore[arg-type]
            )
            return cls(
                client_id=int(r["client-id"]),  # type: ignore[arg-type]
                round=int(r["round"]),  # type: ignore[arg-type]
                protocol=protocol,
                dataset=str(r["dataset"]),
                mean=tuple(float(v) for v in r["mean"]),  # type: ignore[union-attr]
                std=tuple(float(v) for v in r["std"]),  # type: ignore[union-attr]
                parameters=tuple(str(v) for v in r["parameters"]),  # type: ignore[union-attr]
                defenses=defenses_from_json(str(r["defenses"])),
            )
        except KeyError as exc:
            raise LeakshieldError(f"the reply's '{FACTS_RECORD}' record lacks the fact {exc}") from None

    def check_against(self, info: DatasetInfo) -> None:
        """Refuse to attack on other input scaling than the client's (the classic silent mismatch)."""
        if self.dataset != info.name or not _close(self.mean, info.mean) or not _close(self.std, info.std):
            raise LeakshieldError(
                f"client {self.client_id} normalized its inputs as {self.dataset} (mean {list(self.mean)}, "
                f"std {list(self.std)}); the auditor's dataset is {info.name} (mean {list(info.mean)}, "
                f"std {list(info.std)})"
            )


def _close(a: Sequence[float], b: Sequence[float]) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= 1e-6 * max(1.0, abs(y)) for x, y in zip(a, b, strict=True))


def defenses_json(defenses: Sequence[PublicDefense]) -> str:
    return json.dumps([{"name": d.name, "params": d.params.model_dump(mode="json")} for d in defenses])


def defenses_from_json(text: str) -> tuple[PublicDefense, ...]:
    """The defenses' public configs, validated against the registry as ``create_defense`` does."""
    return tuple(create_defense(e["name"], e["params"]).public_config() for e in json.loads(text))


def state_of(record: ArrayRecord) -> dict[str, torch.Tensor]:
    """An ArrayRecord as a state dict of CPU tensors."""
    return {k: v.detach().clone() for k, v in record.to_torch_state_dict().items()}


def update_from_reply(
    sent: Mapping[str, torch.Tensor], reply: Mapping[str, torch.Tensor], facts: ReportedFacts
) -> ClientUpdate:
    """The :class:`ClientUpdate` a reply stands for (see the module docstring for the convention)."""
    missing = sorted(set(sent) ^ set(reply))
    if missing:
        raise LeakshieldError(f"the reply's arrays differ from those sent in keys {missing[:5]}")
    protocol = facts.protocol
    params = [k for k in facts.parameters if k in sent]
    if protocol.algorithm == "fedsgd":
        delta = {k: (sent[k] - reply[k]) / protocol.local_lr for k in params}
    else:
        delta = {k: reply[k] - sent[k] for k in params}
    buffers = {}
    if protocol.algorithm == "fedavg" or protocol.model_mode == "train":
        buffers = {k: reply[k].clone() for k in reply if k not in facts.parameters}
    return ClientUpdate(
        global_params={k: v.clone() for k, v in sent.items()},
        delta=delta,
        protocol=protocol,
        buffers=buffers,
    )


def reply_state(sent: Mapping[str, torch.Tensor], update: ClientUpdate) -> dict[str, torch.Tensor]:
    """The arrays a client replies for ``update`` (the inverse of :func:`update_from_reply`)."""
    protocol = update.protocol
    state = {k: v.detach().clone() for k, v in sent.items()}
    for name, delta in update.delta.items():
        if protocol.algorithm == "fedsgd":
            state[name] = sent[name] - protocol.local_lr * delta.to(sent[name].device)
        else:
            state[name] = sent[name] + delta.to(sent[name].device)
    for name, value in update.buffers.items():
        state[name] = value.detach().to(sent[name].device).clone()
    return state
