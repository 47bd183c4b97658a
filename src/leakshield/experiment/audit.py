"""Auditing a federation's real replies: the server attacks a seeded sample of the updates it received
each round and scores the reconstructions against the ground truth it rebuilds from the deterministic
partitioner (a simulation's privilege; nothing private is ever sent). One auditor serves leakshield's
own :class:`~leakshield.fl.FederatedSimulation` (as a round observer) and the Flower bridge's auditing
strategy, and writes the same run directory and result store as ``leakshield run``, so ``leakshield
report`` works on it: one ``attack`` cell per audited round, its victims the sampled clients.

Under ``fl.secure_aggregation`` the auditor audits what the server can see: the round's aggregate (the
sample-weighted mean of every reply, as Flower's ``SecAggPlusWorkflow`` delivers it), attacked as one
victim whose truth is every client's round data; the cell's threat says ``aggregated``."""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path

import pydantic
import torch
from torch import nn

from leakshield import __version__
from leakshield.artifacts import ArtifactCache
from leakshield.attacks.base import Attack
from leakshield.data import ImageSet
from leakshield.defenses.base import PublicDefense
from leakshield.errors import ConfigError, LeakshieldError, is_storage_problem
from leakshield.experiment.cells import Cell
from leakshield.experiment.code_cache import CodeKeyedCache
from leakshield.experiment.compute import cell_record
from leakshield.experiment.config import ExperimentConfig
from leakshield.experiment.evaluation import CellOutput, load_cell_lpips, score_reconstructions
from leakshield.experiment.federation import NO_CLIENT, Federation
from leakshield.experiment.fitting import FitSetting, fit_attack
from leakshield.experiment.rundir import STORE_FILE, prepare_run_dir
from leakshield.experiment.store import CellRecord, ResultStore, atomic_write_bytes
from leakshield.fl import (
    ClientUpdate,
    RoundObserver,
    ServerKnowledge,
    ThreatModel,
    build_server_view,
    seeded_generator,
)
from leakshield.fl.secure_aggregation import aggregate_updates
from leakshield.image_grid import image_grid, png_bytes
from leakshield.matmul_precision import precision_in_force
from leakshield.registry import Params
from leakshield.seeds import audit_attack_seed
from leakshield.threats import Adversary

#: the key of the audit's sampling stream
AUDIT_STREAM = 0xA0D17
#: the victim id of a round's aggregate (under secure aggregation no single client's reply is seen)
AGGREGATE = -1


class AuditSettings(Params):
    """clients: how many of a round's replies the server attacks (a seeded sample; all if fewer
    replied). rounds: which rounds to audit (0-based, leakshield's numbering; Flower's server round r is
    round r − 1); None audits every round."""

    clients: int = pydantic.Field(default=5, ge=1)
    rounds: list[pydantic.NonNegativeInt] | None = None


def audit_sample(seed: int, round: int, client_ids: Sequence[int], count: int) -> list[int]:
    """The clients audited in ``round``: ``count`` of ``client_ids`` drawn with a generator seeded by
    (seed, round), sorted; the same wherever the replies came from."""
    ids = sorted(client_ids)
    order = torch.randperm(len(ids), generator=seeded_generator(seed, round, AUDIT_STREAM))
    return sorted(ids[i] for i in order[:count].tolist())


class UpdateAuditor(RoundObserver):
    """Attack ``config.attacks[0]`` on sampled replies of the federation of ``config`` and store the
    scores in the run directory ``out`` (created like ``leakshield run``'s; an existing run of the same
    config is continued, its audited rounds recomputed).

    As a :class:`RoundObserver` it audits each round when the round finishes; the Flower strategy calls
    :meth:`audit` directly. ``federation``: reuse one already built for ``config`` (else it is built
    without fitting any client's artifacts: the server never sees a client's data). ``cache``: the run's
    artifact cache (its fits and path calibrations; default: the default cache folder)."""

    def __init__(
        self,
        config: ExperimentConfig,
        out: str | Path,
        *,
        settings: AuditSettings | None = None,
        federation: Federation | None = None,
        seed: int | None = None,
        device: torch.device | str = "cpu",
        progress: bool = False,
        cache: ArtifactCache | None = None,
    ) -> None:
        self.config = config
        self.cache = cache or CodeKeyedCache()
        self.settings = settings or AuditSettings()
        self.federation = federation or Federation.build(
            config, seed=seed, device=device, fits_for=NO_CLIENT, cache=self.cache
        )
        self.device = self.federation.device
        self.progress = progress
        self.attack = self._attack(config)
        self.out = Path(out)
        prepare_run_dir(config, self.out)
        self.store = ResultStore(self.out / STORE_FILE)
        self.store.claim(config.fingerprint())
        self.lpips, self.lpips_reason = load_cell_lpips(config.metrics.lpips, self.device)
        self._sent: dict[int, nn.Module] = {}
        self._replies: dict[int, dict[int, ClientUpdate]] = {}
        self.records: list[CellRecord] = []

    def _attack(self, config: ExperimentConfig) -> Attack:
        if len(config.attacks) != 1:
            raise ConfigError(f"attacks: an audit runs one attack; the config lists {len(config.attacks)}")
        spec = config.attacks[0]
        attack = config.create_attack(spec, self.cache.root)
        if attack.threat.modifies_model:
            raise ConfigError(
                f"attacks[0]: {spec.name} is a malicious-server attack (it changes the model sent); "
                "an audit runs honest-but-curious attacks on the replies"
            )
        if attack.rounds_observed != 1:
            raise ConfigError(
                f"attacks[0]: {spec.name} watches {attack.rounds_observed} rounds; an audit "
                "attacks one reply at a time"
            )
        fed = self.federation
        setting = FitSetting(
            fed.info,
            fed.data.public,
            [],
            config.fl,
            fed.fresh_model(),
            {"name": config.models[0].name, **config.models[0].params},
            fed.seed,
            fed.device,
        )
        attack, _ = fit_attack(attack, setting, self.cache)
        return attack

    # -- as a round observer of leakshield's own simulation -----------------------------------------
    def round_started(self, round: int, model: nn.Module) -> None:
        self._sent[round] = model

    def update_received(self, round: int, client_id: int, update: ClientUpdate) -> None:
        self._replies.setdefault(round, {})[client_id] = update

    def round_finished(self, round: int, model: nn.Module) -> None:
        sent, replies = self._sent.pop(round), self._replies.pop(round, {})
        defenses = {c: self._configured_defenses(c) for c in replies}
        self.audit(round, sent, replies, defenses)

    def _configured_defenses(self, client_id: int) -> tuple[PublicDefense, ...]:
        defended = self.config.fl.is_defended(client_id)
        return self.federation.pipeline.public_config() if defended else ()

    # -- the audit -----------------------------------------------------------------------------------
    def audit(
        self,
        round: int,
        model: nn.Module,
        updates: Mapping[int, ClientUpdate],
        defenses: Mapping[int, tuple[PublicDefense, ...]],
        *,
        summed: ClientUpdate | None = None,
    ) -> CellRecord | None:
        """Attack a sample of ``updates`` (client id → the update received) to ``model`` (as sent in
        ``round``), the attacker knowing each client's public ``defenses``; store and return the cell.
        Under secure aggregation the aggregate of ``updates`` is attacked; ``summed``: the aggregate as
        the server received it (Flower's SecAgg+ reveals nothing else), the keys of ``updates`` then
        naming the clients in it."""
        wanted = self.settings.rounds
        if not updates or (wanted is not None and round not in wanted):
            return None
        aggregated, replies = self.config.fl.secure_aggregation, len(updates)
        if aggregated:  # the server learns the sum of the round's replies only: that is what it audits
            chosen = sorted(updates)
        else:
            chosen = audit_sample(self.federation.seed, round, list(updates), self.settings.clients)
        fed, threat = self.federation, ThreatModel(labels_known=self.config.attack.threat.labels_known)
        start = time.time()
        cell = self._cell(round)
        status, error, metrics, victims, png = "ok", None, {}, [], None
        try:
            truths = [fed.client(c).round_data(round, self.device) for c in chosen]
            for c, truth in zip(chosen, truths, strict=True):  # a client with a config of its own
                reported = updates[c].protocol.num_samples
                if not aggregated and reported != len(truth):  # (an aggregate's facts are the sum's)
                    raise LeakshieldError(
                        f"client {c} computed its update on {reported} samples; this auditor's config "
                        f"gives it {len(truth)}: audit it with its own config"
                    )
            if aggregated:
                truths = [ImageSet(torch.cat([t.x for t in truths]), torch.cat([t.y for t in truths]))]
                received = summed if summed is not None else aggregate_updates([updates[c] for c in chosen])
                updates = {AGGREGATE: received}
                defenses = {AGGREGATE: defenses.get(chosen[0], ())}
                chosen = [AGGREGATE]
            # an honest server's preparation: the model is sent unchanged, secrets from public knowledge
            secrets = self.attack.prepare_model(model, ServerKnowledge(fed.info, fed.data.public)).secrets
            views = [
                build_server_view(
                    model,
                    updates[c],
                    fed.info,
                    threat,
                    labels=truth.y.to(self.device),
                    defenses=defenses.get(c, ()),
                    round=round,
                    secrets=secrets,
                    clients=replies if aggregated else 1,
                )
                for c, truth in zip(chosen, truths, strict=True)
            ]
            seeds = [audit_attack_seed(fed.seed, round, c) for c in chosen]
            recs = self.attack.reconstruct_many(views, seeds=seeds, progress=self.progress)
            pairs = zip(chosen, truths, recs, strict=True)
            extra = [{"client": c, "labels": t.y.tolist(), **r.stats} for c, t, r in pairs]
            output = score_reconstructions(recs, truths, metrics=self.config.metrics, lpips=self.lpips,
                                           lpips_reason=self.lpips_reason, extra=extra)  # fmt: skip
            metrics, victims = output.metrics, output.victims
            if aggregated:
                metrics["aggregate_clients"] = float(views[0].clients)
            png = png_bytes(image_grid(output.grid_rows or []))
        except (Exception, torch.OutOfMemoryError) as exc:  # a failing audit must not stop training
            if is_storage_problem(exc):
                raise
            status, error = "failed", f"{type(exc).__name__}: {exc}"
            victims = [{"clients": chosen, "traceback": traceback.format_exc(limit=4)}]
        return self._put(cell, status, error, metrics, victims, png, start)

    def record_failure(self, round: int, error: str) -> CellRecord:
        """Store the audit of ``round`` as failed (e.g. a reply without protocol facts)."""
        return self._put(self._cell(round), "failed", error, {}, [], None, time.time())

    def _cell(self, round: int) -> Cell:
        config = self.config
        return Cell(
            "attack", config.models[0], config.defenses[0], config.attacks[0], round, self.federation.seed
        )

    def _put(
        self,
        cell: Cell,
        status: str,
        error: str | None,
        metrics: dict,
        victims: list,
        png: bytes | None,
        start: float,
    ) -> CellRecord:
        output = CellOutput(metrics, victims)
        threat = self.attack.threat.granting(labels_known=self.config.attack.threat.labels_known)
        auditor = dataclasses.replace(threat, adversary=Adversary.AUDITOR).as_json()
        if self.config.fl.secure_aggregation:
            auditor["aggregated"] = True
        record = cell_record(cell, output, status=status, error=error, png=png, start=start,
                             environment=self._environment(), threat=auditor)  # fmt: skip
        if record.images is not None and png is not None:
            atomic_write_bytes(self.out / record.images, png)
        self.store.put(record)
        self.records.append(record)
        return record

    def _environment(self) -> dict[str, object]:
        return {
            "leakshield": __version__,
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "device": str(self.device),
            "matmul_precision": precision_in_force(),
            "audit": self.settings.model_dump(mode="json"),
        }

    def model_as_sent(self, state: Mapping[str, torch.Tensor]) -> nn.Module:
        """The global model rebuilt from the arrays the server sent (the Flower strategy's view)."""
        net = self.federation.fresh_model()
        net.load_state_dict({k: v.to(self.device) for k, v in state.items()})
        return net
