"""Flower's secure aggregation (SecAgg+, ``SecAggPlusWorkflow`` and ``secaggplus_mod``) with leakshield's
clients and audit: each client masks its reply, the server unmasks only the sample-weighted mean of the
round's replies, and the audit attacks that aggregate — exactly what such a server can see.

Flower 1.41 runs SecAgg+ through its legacy records (``FitIns``/``FitRes`` inside Messages) and a legacy
strategy, so this module has its own pair of apps:

- :func:`secure_client_app`: a ClientApp with ``secaggplus_mod`` around :class:`SecureTrainStep`, which
  runs :class:`~leakshield.flower.LeakshieldTrainer` (every defense stage in process) on the ``FitIns``
  and replies a ``FitRes``: the trained model's arrays (masked by the mod), the sample count (SecAgg+'s
  weight) and the protocol facts as one JSON metric (public, not masked).
- :func:`secure_server_app`: a ServerApp running ``DefaultWorkflow(fit_workflow=SecAggPlusWorkflow)``
  with :class:`SecureAggregationAudit`, a FedAvg whose ``aggregate_fit`` receives the unmasked mean and
  hands it to the :class:`~leakshield.experiment.audit.UpdateAuditor` as the round's aggregate.

SecAgg+ quantizes the replies: each value is clipped to ±``clipping-range`` and mapped to 2²² levels, so
the mean the server unmasks carries a rounding of about 2·range/2²² per entry (the audit attacks it as
received). The run config adds ``secagg-shares``, ``secagg-threshold`` and ``secagg-clipping-range``
(Flower's ``num_shares``, ``reconstruction_threshold``, ``clipping_range``; defaults 3, 2 and 8) to the
keys of :mod:`leakshield.flower.apps`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import Context, Message
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.common import Code, FitRes, Parameters, Status, log, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.compat.common import recorddict_compat as compat
from flwr.server import LegacyContext, ServerConfig
from flwr.server.strategy import FedAvg
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow
from flwr.serverapp import Grid, ServerApp

from leakshield.errors import ConfigError, LeakshieldError
from leakshield.experiment.audit import AuditSettings, UpdateAuditor
from leakshield.experiment.config import load_config
from leakshield.experiment.federation import NO_CLIENT, Federation
from leakshield.fl import ClientUpdate
from leakshield.flower.apps import SERVER_DEFAULTS, TrainerStep, resolve
from leakshield.flower.client import partition_id
from leakshield.flower.records import ReportedFacts, update_from_reply
from leakshield.metrics.utility import accuracy

#: the legacy metric holding a reply's protocol facts (:meth:`ReportedFacts.to_json`)
FACTS_METRIC = "leakshield-facts"
#: the SecAgg+ run-config defaults (Flower's example values; see the module docstring)
SECAGG_DEFAULTS: dict[str, Any] = {"secagg-shares": 3, "secagg-threshold": 2, "secagg-clipping-range": 8.0}
_WARNING = 30


def state_from_arrays(
    arrays: Sequence[np.ndarray], like: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Legacy parameters (a list of arrays in ``state_dict`` order) as a state dict shaped and typed as
    ``like``; a one-line error when they do not fit."""
    if len(arrays) != len(like):
        raise LeakshieldError(f"{len(arrays)} arrays received for a model of {len(like)} state entries")
    state = {}
    for (name, ref), array in zip(like.items(), arrays, strict=True):
        if tuple(array.shape) != tuple(ref.shape):
            shape, want = tuple(array.shape), tuple(ref.shape)
            raise LeakshieldError(f"{name}: received an array of shape {shape}; the model's is {want}")
        state[name] = torch.as_tensor(np.array(array)).to(ref.dtype)
    return state


def arrays_of(state: Mapping[str, torch.Tensor]) -> Parameters:
    """A state dict as legacy parameters (its values in order)."""
    return ndarrays_to_parameters([v.detach().cpu().numpy() for v in state.values()])


class SecureTrainStep(TrainerStep):
    """The SecAgg+ ClientApp's train function for an experiment config (see the module docstring):
    legacy ``FitIns`` in, :meth:`LeakshieldTrainer.train`, legacy ``FitRes`` out with the facts under
    :data:`FACTS_METRIC`. The round is the config's ``server-round`` (set by
    :func:`secure_server_app`), else the message's group id (Flower's legacy workflows set it)."""

    def __call__(self, msg: Message, context: Context) -> Message:
        trainer = self.trainer(context)
        fitins = compat.recorddict_to_fitins(msg.content, keep_input=True)
        round_ = int(fitins.config.get("server-round", msg.metadata.group_id or 1)) - 1
        client_id, seed = partition_id(context), trainer.seed_for(context)
        like = trainer.federation(client_id, seed).fresh_model().state_dict()
        sent = state_from_arrays(parameters_to_ndarrays(fitins.parameters), like)
        state, facts = trainer.train(client_id, round_, sent, seed)
        fitres = FitRes(Status(Code.OK, ""), arrays_of(state), facts.protocol.num_samples,
                        {FACTS_METRIC: facts.to_json()})  # fmt: skip
        return Message(compat.fitres_to_recorddict(fitres, keep_input=True), reply_to=msg)


def secure_client_app(config: str | Path | None = None, *, base: Path | None = None) -> ClientApp:
    """A ClientApp that trains with :class:`SecureTrainStep` and masks its reply with Flower's
    ``secaggplus_mod`` (``config``, ``base``: as :func:`leakshield.flower.client_app`)."""
    app = ClientApp(mods=[secaggplus_mod])
    app.train()(SecureTrainStep(config, base))
    return app


def aggregate_from_results(sent: Mapping[str, torch.Tensor], aggregate: Mapping[str, torch.Tensor],
                           facts: Sequence[ReportedFacts]) -> ClientUpdate:  # fmt: skip
    """The round's aggregate update from the model ``sent``, the unmasked mean state ``aggregate`` and
    the facts of the clients in it: one client's update rule applied to the mean (exact for FedSGD and
    for FedAvg deltas, whose mean is the mean of the deltas), over every client's samples. Refused when
    the clients' protocols differ (their mean then stands for no single update rule)."""
    if not facts:
        raise LeakshieldError("no client replies in the aggregate")
    first = facts[0].protocol
    rule = (first.algorithm, first.local_lr)
    differing = [f.client_id for f in facts if (f.protocol.algorithm, f.protocol.local_lr) != rule]
    if differing:
        raise LeakshieldError(f"clients {differing} trained with another algorithm or lr than client "
                              f"{facts[0].client_id}: their mean is no one update")  # fmt: skip
    update = update_from_reply(sent, aggregate, facts[0])
    total = sum(f.protocol.num_samples for f in facts)
    return dataclasses.replace(update, protocol=dataclasses.replace(first, num_samples=total))


class SecureAggregationAudit(FedAvg):
    """Flower's legacy FedAvg that, under SecAgg+, audits the aggregate it receives: every result's
    parameters are the unmasked mean (the workflow puts it there), the facts come with each result's
    metrics. ``auditor`` None: no audit (FedAvg alone)."""

    def __init__(self, auditor: UpdateAuditor | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.auditor = auditor
        self._sent: dict[int, dict[str, torch.Tensor]] = {}

    def configure_fit(self, server_round, parameters, client_manager):  # type: ignore[no-untyped-def]
        if self.auditor is not None:
            like = self.auditor.federation.fresh_model().state_dict()
            self._sent = {server_round: state_from_arrays(parameters_to_ndarrays(parameters), like)}
        return super().configure_fit(server_round, parameters, client_manager)

    def aggregate_fit(self, server_round, results, failures):  # type: ignore[no-untyped-def]
        if self.auditor is not None and results:
            try:
                self._audit(server_round, results)
            except LeakshieldError as exc:  # the audit never stops training; the failure is stored
                log(_WARNING, "leakshield audit of round %d failed: %s", server_round, exc)
                self.auditor.record_failure(server_round - 1, str(exc))
        return super().aggregate_fit(server_round, results, failures)

    def _audit(self, server_round: int, results: list) -> None:
        assert self.auditor is not None
        sent = self._sent.get(server_round)
        if sent is None:
            raise LeakshieldError(f"round {server_round}: an aggregate of nothing sent")
        facts = []
        for _, fitres in results:
            if FACTS_METRIC not in fitres.metrics:
                raise LeakshieldError(f"a reply carries no '{FACTS_METRIC}' metric: train with "
                                      "leakshield.flower.secure_client_app")  # fmt: skip
            facts.append(ReportedFacts.from_json(str(fitres.metrics[FACTS_METRIC])))
        for f in facts:
            f.check_against(self.auditor.federation.info)
        aggregate = state_from_arrays(parameters_to_ndarrays(results[0][1].parameters), sent)
        summed = aggregate_from_results(sent, aggregate, facts)
        model = self.auditor.model_as_sent(sent)
        updates = {f.client_id: summed for f in facts}  # the clients in the sum; only `summed` is read
        self.auditor.audit(server_round - 1, model, updates, {f.client_id: f.defenses for f in facts},
                           summed=summed)  # fmt: skip


def secure_server_app(
    config: str | Path | None = None, *, base: Path | None = None, defaults: Mapping[str, Any] | None = None
) -> ServerApp:
    """A ServerApp that trains the config's model with FedAvg under SecAgg+ and audits each round's
    aggregate (run config: the keys of :func:`leakshield.flower.server_app` and :data:`SECAGG_DEFAULTS`;
    ``audit-clients`` 0 turns the audit off). The config must set ``fl.secure_aggregation: true``."""
    app = ServerApp()
    preset = {**SERVER_DEFAULTS, **SECAGG_DEFAULTS, **(defaults or {})}

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        rc = {**preset, **context.run_config}
        experiment = load_config(resolve(str(config or rc["config"]), base))
        if not experiment.fl.secure_aggregation:
            raise ConfigError("fl.secure_aggregation: the SecAgg+ app audits aggregates only; set it to true")
        seed = int(rc.get("seed", experiment.seeds[0]))
        fed = Federation.build(experiment, seed=seed, device=str(rc["device"]), fits_for=NO_CLIENT)
        auditor = None
        if int(rc["audit-clients"]) > 0:
            settings = AuditSettings(clients=int(rc["audit-clients"]))
            out = resolve(str(rc["out"]), base)
            auditor = UpdateAuditor(experiment, out, settings=settings, federation=fed)
        clients = experiment.fl.clients
        strategy = SecureAggregationAudit(
            auditor,
            fraction_fit=float(rc["fraction-train"]),
            fraction_evaluate=0.0,
            min_fit_clients=min(clients, 2),
            min_available_clients=clients,
            initial_parameters=arrays_of(fed.fresh_model().state_dict()),
            on_fit_config_fn=lambda server_round: {"server-round": server_round},
            evaluate_fn=lambda server_round, arrays, _: _test_accuracy(fed, arrays),
        )
        legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=int(rc["num-rounds"])),
                               strategy=strategy)  # fmt: skip
        secagg = SecAggPlusWorkflow(
            num_shares=rc["secagg-shares"],
            reconstruction_threshold=rc["secagg-threshold"],
            clipping_range=float(rc["secagg-clipping-range"]),
        )
        DefaultWorkflow(fit_workflow=secagg)(grid, legacy)

    return app


def _test_accuracy(fed: Federation, arrays: Sequence[np.ndarray]) -> tuple[float, dict[str, float]]:
    model = fed.fresh_model()
    state = state_from_arrays(arrays, model.state_dict())
    model.load_state_dict({k: v.to(fed.device) for k, v in state.items()})
    with torch.no_grad():
        acc = accuracy(model, fed.data.test.to(fed.device), normalize=fed.info.normalize)
    return 0.0, {"accuracy": acc}
