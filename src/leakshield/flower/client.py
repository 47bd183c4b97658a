"""The client side of the bridge: leakshield's honest client as a Flower train step, and an optional
self-audit for deployments (the client inverts its own update and sends back only the scores)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from flwr.app import ArrayRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp.typing import ClientAppCallable

from leakshield.artifacts import ArtifactCache
from leakshield.attacks.base import Attack, Reconstruction, create_attack
from leakshield.data.types import ImageSet
from leakshield.defenses.base import DefensePipeline, PublicDefense
from leakshield.errors import ConfigError, LeakshieldError
from leakshield.experiment.config import ExperimentConfig, load_config
from leakshield.experiment.evaluation import score_reconstructions
from leakshield.experiment.federation import NO_CLIENT, Federation
from leakshield.fl import ThreatModel, build_server_view
from leakshield.fl.types import ClientUpdate
from leakshield.flower.mods import announced, error_reply
from leakshield.flower.records import FACTS_RECORD, ReportedFacts, reply_state, state_of, update_from_reply
from leakshield.seeds import audit_attack_seed


def _config(config: ExperimentConfig | str | Path) -> ExperimentConfig:
    return config if isinstance(config, ExperimentConfig) else load_config(config)


def partition_id(context: Context) -> int:
    """The client's id: its node config's ``partition-id`` (set by Flower's simulation; set it on a
    deployed SuperNode with ``--node-config "partition-id=3"``)."""
    if "partition-id" not in context.node_config:
        raise ConfigError(
            "node_config: no 'partition-id'; start the SuperNode with --node-config partition-id=N"
        )
    value = context.node_config["partition-id"]
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"node_config: partition-id {value!r} is not a whole number") from None


def server_round(msg: Message) -> int:
    """Flower's server round (1-based) as leakshield's 0-based round."""
    config = msg.content.config_records.get("config")
    if config is None or "server-round" not in config:
        raise LeakshieldError(
            "the train message's 'config' record has no 'server-round' (Flower strategies set it)"
        )
    value = config["server-round"]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LeakshieldError(
            f"the train message's 'server-round' is {value!r}, not a round number (1, 2, …)"
        )
    return value - 1


class LeakshieldTrainer:
    """A Flower train step that runs leakshield's honest client for ``config`` (an
    :class:`ExperimentConfig` or a path to its YAML): the client with this node's ``partition-id``
    trains its partition of ``config.dataset`` under ``config.defenses[0]`` (FedSGD: one minibatch it
    draws; FedAvg: local epochs over its data; ``config.fl.local``) and replies with its model after
    training, the sample count (``num-examples``) and the protocol facts
    (:class:`~leakshield.flower.records.ReportedFacts`).

    Use it as the ClientApp's train function: ``app.train()(LeakshieldTrainer("cfg.yaml"))``. Defenses
    that mods around it announce (:class:`~leakshield.flower.mods.ReleaseDefenseMod`) are left to the
    mods. seed: the client's seed (None: the run config's ``seed``, else ``config.seeds[0]``)."""

    def __init__(
        self,
        config: ExperimentConfig | str | Path,
        *,
        seed: int | None = None,
        device: str = "cpu",
        cache: ArtifactCache | None = None,
    ) -> None:
        self.config = _config(config)
        self.seed = seed
        self.device = device
        self.cache = cache
        self._federations: dict[tuple[int, int], Federation] = {}
        self._entries = self.config.defenses[0].entries

    def federation(self, client_id: int, seed: int) -> Federation:
        """The federation as client ``client_id`` builds it (fitting its own artifacts only; one
        federation serves every client of this process when no defense fits per client)."""
        per_client = any(
            d.fit_scope == "client" and not d.fit_measures_only
            for d in DefensePipeline.from_config(self._entries).defenses
        )  # a fit that only measures (DCS²'s budget) is the leaderboard's, not a client's
        key = (client_id if per_client else NO_CLIENT, seed)
        if key not in self._federations:
            self._federations[key] = Federation.build(
                self.config, seed=seed, device=self.device, fits_for=key[0], cache=self.cache
            )
        return self._federations[key]

    def trainer_for(self, client_id: int) -> LeakshieldTrainer:
        """The train step of client ``client_id``: this one (see :class:`PerClientTrainer`)."""
        return self

    def seed_for(self, context: Context) -> int:
        """The client's seed: the one given, else the run config's ``seed``, else the config's first."""
        if self.seed is not None:
            return self.seed
        return int(context.run_config.get("seed", self.config.seeds[0]))

    def __call__(self, msg: Message, context: Context) -> Message:
        client_id, round_ = partition_id(context), server_round(msg)
        key, arrays = next(iter(msg.content.array_records.items()))
        sent = state_of(arrays)
        state, facts = self.train(client_id, round_, sent, self.seed_for(context), announced(msg))
        content = RecordDict(
            {
                key: ArrayRecord(state),
                "metrics": MetricRecord({"num-examples": facts.protocol.num_samples}),
                FACTS_RECORD: facts.to_record(),
            }
        )
        return Message(content, reply_to=msg)

    def train(
        self,
        client_id: int,
        round_: int,
        sent: dict[str, torch.Tensor],
        seed: int,
        mods: Sequence[PublicDefense] = (),
    ) -> tuple[dict[str, torch.Tensor], ReportedFacts]:
        """Client ``client_id``'s reply in ``round_`` (0-based) to the model ``sent`` (a state dict):
        its state after local training and its protocol facts; ``mods``: the defenses that mods
        around this step apply (left out of the pipeline)."""
        fed = self.federation(client_id, seed)
        client = fed.client(client_id)
        pipeline = without_suffix(client.pipeline, list(mods))
        model = fed.fresh_model()
        model.load_state_dict(sent)
        trainer = dataclasses.replace(client, pipeline=pipeline, refusals=[])
        update = trainer.fit(model, round_)
        if update is None and trainer.refusals:
            raise LeakshieldError(f"client {client_id} refused the model of round {round_}: "
                                  f"{trainer.refusals[-1][1]}")  # fmt: skip
        if update is None:
            raise LeakshieldError(f"client {client_id} holds no data; give every client samples")
        info = fed.info
        facts = ReportedFacts(
            client_id=client_id,
            round=round_,
            protocol=update.protocol,
            dataset=info.name,
            mean=info.mean,
            std=info.std,
            parameters=tuple(name for name, _ in model.named_parameters()),
            defenses=(*pipeline.public_config(), *mods),
        )
        return reply_state(sent, update), facts


class PerClientTrainer:
    """A train step for clients with local settings of their own (batch size, local steps, defenses):
    client ``i`` runs ``trainers[i]``, every other client ``default``. Their configs must describe one
    federation (the same dataset, partition, model and seeds)."""

    def __init__(self, trainers: dict[int, LeakshieldTrainer], default: LeakshieldTrainer) -> None:
        self.trainers, self.default = dict(trainers), default

    def trainer_for(self, client_id: int) -> LeakshieldTrainer:
        return self.trainers.get(client_id, self.default)

    def __call__(self, msg: Message, context: Context) -> Message:
        try:
            client = partition_id(context)
        except LeakshieldError as exc:  # a node the step cannot place answers with an error, never a raise
            return error_reply(msg, f"client {context.node_config.get('partition-id', '?')}: {exc}")
        return self.trainer_for(client)(msg, context)


def without_suffix(pipeline: DefensePipeline, applied: list[PublicDefense]) -> DefensePipeline:
    """``pipeline`` without the defenses at its end that mods apply (as announced); mods applying a
    defense the configured stack does not end with are extra and leave the pipeline whole."""
    k = len(applied)
    configured = pipeline.public_config()
    if k == 0 or tuple(configured[-k:]) != tuple(applied):
        return pipeline
    return DefensePipeline(pipeline.defenses[: len(configured) - k], pipeline.client_artifacts)


def attack_own_update(
    attack: Attack, fed: Federation, update: ClientUpdate, facts: ReportedFacts
) -> tuple[Reconstruction, ImageSet]:
    """What ``attack`` rebuilds from a client's own ``update`` (the server's view of it, the client's
    public defenses known), and the client's batch it was computed on: a client's self-audit."""
    truth = fed.client(facts.client_id).round_data(facts.round, fed.device)
    threat = ThreatModel(labels_known=fed.config.attack.threat.labels_known)
    view = build_server_view(fed.fresh_model(), update, fed.info, threat, labels=truth.y,
                             defenses=facts.defenses, round=facts.round)  # fmt: skip
    seed = audit_attack_seed(fed.seed, facts.round, facts.client_id)
    return attack.reconstruct(view, seed=seed), truth


class SelfAuditMod:
    """For deployments, where the server must not see ground truth: the client inverts its own final
    reply (after every mod inside this one; list it first) with ``config.attacks[0]`` and adds only the
    scores to the reply's metrics (``leakshield-psnr``, ``leakshield-ssim``; a strategy averages them
    weighted by ``num-examples``). Costly: one attack per client per round; ``every`` audits every n-th
    round only."""

    def __init__(self, trainer: LeakshieldTrainer, *, every: int = 1, **attack_params: Any) -> None:
        spec = trainer.config.attacks[0]
        self.trainer = trainer
        self.attack = create_attack(spec.name, {**spec.params, **attack_params})
        self.every = every

    def __call__(self, msg: Message, ctxt: Context, call_next: ClientAppCallable) -> Message:
        if msg.metadata.message_type != MessageType.TRAIN:
            return call_next(msg, ctxt)
        sent = state_of(next(iter(msg.content.array_records.values())))
        reply = call_next(msg, ctxt)
        if reply.has_error():
            return reply
        facts = ReportedFacts.from_message(reply)
        if facts.round % self.every:
            return reply
        fed = self.trainer.federation(facts.client_id, self.trainer.seed_for(ctxt))
        update = update_from_reply(sent, state_of(next(iter(reply.content.array_records.values()))), facts)
        reconstruction, truth = attack_own_update(self.attack, fed, update, facts)
        (scored,) = score_reconstructions([reconstruction], [truth], metrics=fed.config.metrics).victims
        metrics = next(iter(reply.content.metric_records.values()))
        metrics["leakshield-psnr"] = sum(scored["psnr"]) / len(truth)
        metrics["leakshield-ssim"] = sum(scored["ssim"]) / len(truth)
        return reply
