"""Ready-made Flower apps for a leakshield experiment config: a ``ClientApp`` running leakshield's
honest client (update-stage defenses as mods) and a ``ServerApp`` running any strategy (FedAvg by
default) wrapped in the audit. Their run config (``[tool.flwr.app.config]``, overridable with
``flwr run . --run-config``):

=================  ===========================================================================
``config``         the experiment YAML (relative paths: to the app's folder ``base``)
``num-rounds``     FL rounds (default 3)
``seed``           the federation's seed (default: the config's first seed)
``out``            the run directory: the audit, ``accuracy.json`` (``leakshield report OUT`` reads it)
``audit-clients``  replies attacked per round (default 5; 0 turns the audit off)
``fraction-train`` share of the nodes sampled each round (default 1.0)
``device``         ``cpu`` (default) or ``cuda``
``dp-clip``        > 0: central client-level DP with Flower's own wrappers — the audited strategy
                   wrapped in ``DifferentialPrivacyClientSideFixedClipping``, which sends this L2
                   bound to the clients; the client app then clips its reply with Flower's
                   ``fixedclipping_mod`` (default 0: off)
``dp-noise``       its noise multiplier σ: N(0, (σ·clip/m)²) on the mean of m replies (default 1.0);
                   a central ``dp-fedavg`` in the config's defenses sets both when ``dp-clip`` is 0
=================  ===========================================================================

Under ``dp-clip`` the audit attacks the clipped replies, which is what the server sees: central DP's
noise is added after aggregation and protects the published model, not the replies.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord
from flwr.clientapp import ClientApp
from flwr.clientapp.mod import fixedclipping_mod
from flwr.common import log
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import DifferentialPrivacyClientSideFixedClipping, FedAvg, Strategy
from flwr.supercore.differential_privacy import KEY_CLIPPING_NORM

from leakshield.defenses.base import DefensePipeline
from leakshield.errors import LeakshieldError
from leakshield.experiment.audit import AuditSettings, UpdateAuditor
from leakshield.experiment.config import load_config
from leakshield.experiment.federation import NO_CLIENT, Federation
from leakshield.flower.client import LeakshieldTrainer, partition_id
from leakshield.flower.guard import GuardMod
from leakshield.flower.mods import error_reply, release_mods
from leakshield.flower.strategy import AuditingStrategy
from leakshield.metrics.utility import accuracy


def resolve(path: str | Path, base: Path | None) -> Path:
    path = Path(path)
    return path if path.is_absolute() or base is None else base / path


class TrainerStep:
    """Base of a ClientApp train function for an experiment config (``config``, else the run config's
    ``config``; relative paths from ``base``): picklable (Ray ships it to its actors), its
    :class:`LeakshieldTrainer` built lazily in each process."""

    def __init__(self, config: str | Path | None = None, base: Path | None = None) -> None:
        self.config, self.base = config, base
        self._trainer: LeakshieldTrainer | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_trainer": None}

    def trainer(self, context: Context) -> LeakshieldTrainer:
        if self._trainer is None:
            path = resolve(str(self.config or context.run_config["config"]), self.base)
            self._trainer = LeakshieldTrainer(path, device=str(context.run_config.get("device", "cpu")))
        return self._trainer


class ConfiguredTrainStep(TrainerStep):
    """The ClientApp's train function for an experiment config (see :class:`TrainerStep`). On the
    clients the config defends, the defense stack's trailing update-stage defenses run as
    :class:`~leakshield.flower.mods.ReleaseDefenseMod` mods around :class:`LeakshieldTrainer`, the
    rest in it; a stack with a client guard runs :class:`~leakshield.flower.guard.GuardMod` right
    before the train step."""

    _guard: GuardMod | None = None

    def __getstate__(self) -> dict:
        return {**super().__getstate__(), "_guard": None}

    def guard(self, step: LeakshieldTrainer) -> GuardMod:
        """The process's one guard mod (it remembers what each client accepted, for drift-guard)."""
        if self._guard is None or self._guard.trainer is not step:
            self._guard = GuardMod(step)
        return self._guard

    def __call__(self, msg: Message, context: Context) -> Message:
        step = self.trainer(context)
        chain = step
        try:
            client = partition_id(context)
        except LeakshieldError as exc:  # a node the app cannot place answers with an error, never a raise
            return error_reply(msg, f"client {context.node_config.get('partition-id', '?')}: {exc}")
        if step.config.fl.is_defended(client):
            if DefensePipeline.from_config(step.config.defenses[0].entries).guards:  # innermost
                chain = functools.partial(self.guard(step), call_next=chain)
            for mod in reversed(release_mods(step.config.defenses[0].entries)):
                chain = functools.partial(mod, call_next=chain)
        if asks_for_clipping(msg):  # Flower's DP wrapper sent its clipping norm: its mod clips last
            chain = functools.partial(fixedclipping_mod, call_next=chain)
        return chain(msg, context)


def asks_for_clipping(msg: Message) -> bool:
    """Whether the server's message carries the clipping norm of Flower's client-side-clipping DP wrapper
    (``DifferentialPrivacyClientSideFixedClipping``), which its ``fixedclipping_mod`` applies."""
    return any(KEY_CLIPPING_NORM in record for record in msg.content.config_records.values())


def client_app(config: str | Path | None = None, *, base: Path | None = None) -> ClientApp:
    """A ClientApp whose train step is :class:`ConfiguredTrainStep` for ``config`` (None: the run
    config's ``config``; relative paths are taken from ``base``)."""
    app = ClientApp()
    app.train()(ConfiguredTrainStep(config, base))
    return app


#: the server's record of the central test accuracy after each round (``{round: accuracy}``)
ACCURACY_FILE = "accuracy.json"
#: the server's run-config defaults (see the module docstring)
SERVER_DEFAULTS: dict[str, Any] = {
    "num-rounds": 3,
    "out": "runs/flower",
    "audit-clients": 5,
    "fraction-train": 1.0,
    "device": "cpu",
    "dp-clip": 0.0,
    "dp-noise": 1.0,
}


def server_app(
    config: str | Path | None = None,
    *,
    base: Path | None = None,
    strategy: type[Strategy] = FedAvg,
    defaults: Mapping[str, Any] | None = None,
) -> ServerApp:
    """A ServerApp that trains the config's model with ``strategy`` (FedAvg: every sampled node, no
    federated evaluation; the test accuracy is computed centrally after each round) wrapped in
    :class:`AuditingStrategy`; the audit's run directory is the run config's ``out``. ``defaults``
    override :data:`SERVER_DEFAULTS`; the run config overrides both."""
    app = ServerApp()
    preset = {**SERVER_DEFAULTS, **(defaults or {})}

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        rc = {**preset, **context.run_config}
        experiment = load_config(resolve(str(config or rc["config"]), base))
        seed = int(rc.get("seed", experiment.seeds[0]))
        device = str(rc["device"])
        fed = Federation.build(experiment, seed=seed, device=device, fits_for=NO_CLIENT)
        clients = experiment.fl.clients
        inner = strategy(  # type: ignore[call-arg]
            fraction_train=float(rc["fraction-train"]),
            fraction_evaluate=0.0,
            min_available_nodes=clients,
        )
        audit_clients = int(rc["audit-clients"])
        if audit_clients > 0:
            out = resolve(str(rc["out"]), base)
            auditor = UpdateAuditor(
                experiment, out, settings=AuditSettings(clients=audit_clients), federation=fed
            )
            inner = AuditingStrategy(inner, auditor)
        dp = central_dp_settings(experiment.defenses[0].entries, rc)
        if dp is not None:
            inner = central_dp(inner, *dp, clients, rc)
        model = fed.fresh_model()
        result = inner.start(
            grid=grid,
            initial_arrays=ArrayRecord(model.state_dict()),
            num_rounds=int(rc["num-rounds"]),
            evaluate_fn=functools.partial(_test_accuracy, fed),
        )
        log(20, "leakshield: final test accuracy %s", result.evaluate_metrics_serverapp)
        history = {int(r): float(m["accuracy"]) for r, m in result.evaluate_metrics_serverapp.items()}
        out = resolve(str(rc["out"]), base)
        out.mkdir(parents=True, exist_ok=True)
        (out / ACCURACY_FILE).write_text(json.dumps(history, indent=1))

    return app


def central_dp_settings(entries: list, rc: Mapping[str, Any]) -> tuple[float, float] | None:
    """(σ, S) of central client-level DP: the run config's ``dp-noise`` and ``dp-clip`` when ``dp-clip``
    is set, else those of a central ``dp-fedavg`` in the config's defenses (whose noise Flower's wrapper
    then adds: leakshield's server stage does not run under Flower), else None."""
    if float(rc["dp-clip"]) > 0:
        return float(rc["dp-noise"]), float(rc["dp-clip"])
    for defense in DefensePipeline.from_config(entries).defenses:
        if defense.name == "dp-fedavg" and getattr(defense.params, "mode", "") == "central":
            return float(defense.params.noise_multiplier), float(defense.params.clip)  # type: ignore[attr-defined]
    return None


def central_dp(inner: Strategy, noise: float, clip: float, clients: int, rc: Mapping[str, Any]) -> Strategy:
    """``inner`` wrapped in Flower's ``DifferentialPrivacyClientSideFixedClipping`` (σ ``noise``, clipping
    norm ``clip``, m the nodes FedAvg samples a round: ``max(int(fraction-train · clients), 2)``). Flower
    sizes the noise σ·S/m for equal weights while FedAvg weights replies by their sample counts: the
    guarantee is σ's when the clients hold equally many samples."""
    sampled = max(int(float(rc["fraction-train"]) * clients), min(2, clients))
    return DifferentialPrivacyClientSideFixedClipping(inner, noise, clip, sampled)


def _test_accuracy(fed: Federation, server_round: int, arrays: ArrayRecord) -> MetricRecord:
    model = fed.fresh_model()
    model.load_state_dict({k: v.to(fed.device) for k, v in arrays.to_torch_state_dict().items()})
    with torch.no_grad():
        acc = accuracy(model, fed.data.test.to(fed.device), normalize=fed.info.normalize)
    return MetricRecord({"accuracy": acc})
