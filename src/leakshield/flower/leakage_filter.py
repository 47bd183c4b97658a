"""A client that checks its own update before sending it: the leakage filter of Hatamizadeh et al. (*Do
Gradient Inversion Attacks Make Federated Learning Unsafe?*, IEEE TMI 2023; NVFlare's gradient-inversion
filter). The client holds the ground truth a server lacks: each checked round it runs a configured,
cheap attack on its own outgoing update, scores the reconstruction against its own batch, and where the
leakage exceeds a threshold it acts before anything leaves — refuses to send, or releases the update
through update-stage defenses (clipping and Gaussian noise by default) and checks it again. Every
decision is appended to ``leakage_filter.jsonl`` in the run directory, which ``leakshield report``
shows.

A victim counts as reconstructed when its SSIM is at least ``leak_ssim`` *and* above its own
no-information score (the public split's mean image against it), so with the default metric (the share
of the batch reconstructed) an update from which nothing can be read is never held back."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any, Literal

import pydantic
import torch
from flwr.app import ArrayRecord, Context, Message, MessageType
from flwr.clientapp.typing import ClientAppCallable

from leakshield.attacks.base import Reconstruction, create_attack
from leakshield.defenses.base import create_defense
from leakshield.errors import ConfigError, LeakshieldError
from leakshield.experiment.evaluation import score_reconstructions
from leakshield.flower.client import LeakshieldTrainer, PerClientTrainer, attack_own_update
from leakshield.flower.mods import error_reply, is_release_only, release_update
from leakshield.flower.records import FACTS_RECORD, ReportedFacts, reply_state, state_of, update_from_reply
from leakshield.registry import component_entry, format_validation_error
from leakshield.report.filter_log import FILTER_LOG
from leakshield.seeds import seeded_generator
from leakshield.threats import Adversary

#: the release stream's stage number for the filter's own defenses (apart from the client's defenses)
FILTER_STREAM = 7_001


class LeakageFilterSettings(pydantic.BaseModel):
    """attack / attack_params: the attack the client runs on its own update (None: the trainer config's
    first attack); metric: ``leak-rate`` (share of the batch reconstructed) or ``ssim`` (mean SSIM);
    threshold: act when the metric is above it (leak-rate 0: any reconstructed image); leak_ssim: the
    SSIM at which an image counts as reconstructed; action: ``refuse`` (send an error reply, no update)
    or ``defend`` (release through ``defenses``, then check again with the same attack: still above,
    refuse; an adaptive attacker who reads the added defenses may do better, so keep noise among them);
    share: the share of rounds checked (a seeded draw per round and client); secret: the seed of the
    filter's noise with the round and the client (None: drawn from the operating system, so the server,
    who knows the federation's seed, cannot regenerate and subtract it; fix it only to reproduce a
    simulation). The defaults' noise (σ 0.1) is on the update: FedSGD's gradient, FedAvg's Δθ."""

    model_config = pydantic.ConfigDict(extra="forbid", allow_inf_nan=False)
    attack: str | None = None
    attack_params: dict[str, Any] = pydantic.Field(default_factory=dict)
    metric: Literal["leak-rate", "ssim"] = "leak-rate"
    threshold: float = pydantic.Field(default=0.0, ge=0.0, lt=1.0)
    leak_ssim: float = pydantic.Field(default=0.6, gt=0.0, le=1.0)
    action: Literal["refuse", "defend"] = "defend"
    defenses: list[dict[str, Any]] = pydantic.Field(
        default_factory=lambda: [
            {"name": "clipping", "params": {"bound": 1.0}},
            {"name": "gaussian-noise", "params": {"sigma": 0.1}},
        ]
    )
    share: float = pydantic.Field(default=1.0, gt=0.0, le=1.0)
    secret: int | None = pydantic.Field(default=None, ge=0, lt=2**63)

    @pydantic.field_validator("defenses", mode="before")
    @classmethod
    def _entries(cls, value: Any) -> Any:
        """Each defense as configs write it (a name, flat or nested parameters: one reader,
        :func:`~leakshield.registry.component_entry`) as ``{"name": …, "params": {…}}``."""
        if not isinstance(value, list):
            return value
        out = []
        for i, entry in enumerate(value):
            flat = component_entry(entry)
            if not isinstance(flat, dict) or not isinstance(flat.get("name"), str):
                raise ValueError(f"entry {i}: a defense name, or a mapping with 'name' and its parameters")
            out.append({"name": flat["name"], "params": {k: v for k, v in flat.items() if k != "name"}})
        return out


def validated(settings: dict[str, Any]) -> LeakageFilterSettings:
    """``settings`` as :class:`LeakageFilterSettings` (its defenses update-stage ones, its attack a
    passive one), or a one-line :class:`ConfigError`."""
    try:
        found = LeakageFilterSettings(**settings)
    except pydantic.ValidationError as exc:
        raise ConfigError(f"leakage filter: {format_validation_error(exc)}") from None
    for i, entry in enumerate(found.defenses):
        try:
            defense = create_defense(entry["name"], entry["params"])
        except LeakshieldError as exc:
            raise ConfigError(f"leakage filter: defenses[{i}]: {exc}") from None
        if not is_release_only(defense):
            raise ConfigError(
                f"leakage filter: defenses: {entry['name']} is not an update-stage defense (allowed: "
                "clipping, gaussian-noise, laplacian-noise, pruning, quantization)"
            )
    if found.attack is not None:
        passive_attack(found.attack, found.attack_params)
    return found


def passive_attack(name: str, params: dict[str, Any]) -> Any:
    """The attack a client runs on its own update: a passive one (it reads the update; a malicious
    server's attack needs the model it would have sent)."""
    attack = create_attack(name, params)
    if attack.threat.adversary is not Adversary.OBSERVING_SERVER:
        raise ConfigError(f"leakage filter: attack {name} is not a passive attack (its adversary: "
                          f"{attack.threat.adversary}); the client runs one on its own update")  # fmt: skip
    return attack


@dataclasses.dataclass(frozen=True)
class Leakage:
    """A measured update: the share of its images reconstructed and their mean SSIM."""

    leak_rate: float
    ssim: float

    def value(self, metric: str) -> float:
        return self.leak_rate if metric == "leak-rate" else self.ssim


def leakage(ssim: list[float], floor: list[float], leak_ssim: float) -> Leakage:
    """A batch's leakage from its images' SSIM and their no-information scores (``floor``): an image is
    reconstructed when its SSIM is at least ``leak_ssim`` and above its floor."""
    leaked = [s >= leak_ssim and s > f for s, f in zip(ssim, floor, strict=True)]
    return Leakage(sum(leaked) / len(leaked), sum(ssim) / len(ssim))


class LeakageFilterMod:
    """The leakage filter as a Flower client mod: list it first in ``mods`` (outermost), so that it
    checks the update as it finally leaves, after every other mod. ``trainer``: the train step
    (:class:`~leakshield.flower.client.LeakshieldTrainer` or
    :class:`~leakshield.flower.client.PerClientTrainer`), which rebuilds the client's own batch;
    ``out``: the run directory its decisions go to (None: not written); settings: see
    :class:`LeakageFilterSettings`."""

    def __init__(self, trainer: Any, *, out: str | Path | None = None, **settings: Any) -> None:
        self.settings = validated(settings)
        self.trainer = trainer
        self.out = None if out is None else Path(out).resolve()
        self.defenses = [create_defense(d["name"], d.get("params")) for d in self.settings.defenses]
        secret = self.settings.secret
        self.secret = int.from_bytes(os.urandom(7), "big") if secret is None else secret
        #: every decision of this process, as written to the log
        self.decisions: list[dict[str, Any]] = []

    def _attack(self, config: Any) -> Any:
        s = self.settings
        if s.attack is None and not config.attacks:
            raise ConfigError("leakage filter: no attack given and the trainer's config lists none")
        name = s.attack or config.attacks[0].name
        params = {} if s.attack else dict(config.attacks[0].params)
        return passive_attack(name, {**params, **s.attack_params})

    def __call__(self, msg: Message, ctxt: Context, call_next: ClientAppCallable) -> Message:
        if msg.metadata.message_type != MessageType.TRAIN:
            return call_next(msg, ctxt)
        records = list(msg.content.array_records.values())
        if len(records) != 1:  # nothing it could check: refused before training
            return error_reply(
                msg, f"leakage filter: expected one ArrayRecord in the message, got {len(records)}"
            )
        sent = state_of(records[0])
        reply = call_next(msg, ctxt)
        if reply.has_error():
            return reply
        try:
            return self._filter(msg, reply, sent, ctxt)
        except Exception as exc:  # a filter that cannot check sends nothing, and says why
            self._log(None, {"run": ctxt.run_id, "action": "refused (check failed)", "error": str(exc)},
                      time.perf_counter())  # fmt: skip
            return error_reply(msg, f"leakage filter: {type(exc).__name__}: {exc}")

    def _filter(self, msg: Message, reply: Message, sent: dict[str, torch.Tensor], ctxt: Context) -> Message:
        start = time.perf_counter()
        facts = ReportedFacts.from_message(reply)
        step = self.trainer.trainer_for(facts.client_id)
        seed = step.seed_for(ctxt)
        s = self.settings
        decision = {
            "run": ctxt.run_id,
            "round": facts.round,
            "client": facts.client_id,
            "metric": s.metric,
            "threshold": s.threshold,
        }
        if not self._checked(seed, facts):
            return self._log(reply, {**decision, "action": "sent unchecked"}, start)
        fed = step.federation(facts.client_id, seed)
        key, arrays = next(iter(reply.content.array_records.items()))
        update = update_from_reply(sent, state_of(arrays), facts)
        measured = self.measure(fed, update, facts)
        decision.update(measured=dataclasses.asdict(measured))
        limit, metric = self.settings.threshold, self.settings.metric
        if measured.value(metric) <= limit:
            return self._log(reply, {**decision, "action": "sent"}, start)
        if self.settings.action == "refuse":
            self._log(None, {**decision, "action": "refused"}, start)
            return error_reply(msg, f"leakage filter: client {facts.client_id} refused to send round "
                               f"{facts.round}: {metric} {measured.value(metric):.3f} > {limit}")  # fmt: skip
        added = tuple(d.public_config() for d in self.defenses)
        released = dataclasses.replace(facts, defenses=(*facts.defenses, *added))
        generator = seeded_generator(self.secret, facts.round, facts.client_id, FILTER_STREAM)
        state = reply_state(sent, release_update(self.defenses, update, facts, generator))
        after = self.measure(fed, update_from_reply(sent, state, released), released)  # what is sent
        decision.update(released=dataclasses.asdict(after))
        if after.value(metric) > limit:
            self._log(None, {**decision, "action": "refused (still leaking after its defenses)"}, start)
            said = f"{metric} {after.value(metric):.3f} > {limit} even defended"
            return error_reply(msg, f"leakage filter: client {facts.client_id} refused to send round "
                               f"{facts.round}: {said}")  # fmt: skip
        reply.content[key] = ArrayRecord(state)
        reply.content[FACTS_RECORD] = released.to_record()  # the server learns the defenses (Kerckhoffs)
        return self._log(reply, {**decision, "action": "defended"}, start)

    def _checked(self, seed: int, facts: ReportedFacts) -> bool:
        if self.settings.share >= 1.0:
            return True
        draw = torch.rand((), generator=seeded_generator(seed, facts.round, facts.client_id, FILTER_STREAM))
        return bool(draw < self.settings.share)

    def measure(self, fed: Any, update: Any, facts: ReportedFacts) -> Leakage:
        """The leakage of ``update`` as the configured attack finds it, against the client's own batch."""
        guess, truth = attack_own_update(self._attack(fed.config), fed, update, facts)
        mean = fed.data.public.x.mean(dim=0, keepdim=True)
        blank = Reconstruction(images=mean.expand(len(truth), -1, -1, -1).clone())
        scores = score_reconstructions([guess, blank], [truth, truth], metrics=fed.config.metrics)
        scored, reference = scores.victims
        return leakage(scored["ssim"], reference["ssim"], self.settings.leak_ssim)

    def _log(self, reply: Message | None, decision: dict[str, Any], start: float) -> Message | None:
        decision["seconds"] = round(time.perf_counter() - start, 4)
        self.decisions.append(decision)
        if self.out is not None:
            self.out.mkdir(parents=True, exist_ok=True)
            with (self.out / FILTER_LOG).open("a") as handle:  # one line per write: appends do not interleave
                handle.write(json.dumps(decision, sort_keys=True) + "\n")
        return reply


class FilteredTrainStep:
    """A ClientApp train function: leakshield's honest client for ``config`` (``per_client``: clients
    with configs of their own, e.g. another batch size) behind a :class:`LeakageFilterMod` with
    ``settings`` that logs to ``out``. Picklable (Ray ships it to its actors); built lazily in each
    process."""

    def __init__(
        self,
        config: str | Path,
        *,
        per_client: dict[int, str | Path] | None = None,
        out: str | Path | None = None,
        **settings: Any,
    ) -> None:
        validated(settings)  # refused here, not in a Ray actor
        self.config = Path(config).resolve()  # an actor's working folder may be another
        self.per_client = {int(c): Path(p).resolve() for c, p in (per_client or {}).items()}
        self.out = None if out is None else Path(out).resolve()
        self.settings = settings
        self._built: tuple[Any, LeakageFilterMod] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_built": None}

    def __call__(self, msg: Message, context: Context) -> Message:
        if self._built is None:
            device = str(context.run_config.get("device", "cpu"))
            trainers = {c: LeakshieldTrainer(path, device=device) for c, path in self.per_client.items()}
            step = PerClientTrainer(trainers, LeakshieldTrainer(self.config, device=device))
            self._built = step, LeakageFilterMod(step, out=self.out, **self.settings)
        step, mod = self._built
        return mod(msg, context, step)
