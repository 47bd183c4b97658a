"""Update-stage defenses as Flower client mods (``ClientApp(mods=[...])`` or ``@app.train(mods=[...])``).

A mod sees what leaves the client and nothing else: the arrays the server sent, the client's reply and
the reply's protocol facts (:mod:`leakshield.flower.records`). So only defenses that act on the update
alone can be mods: those whose one stage is the release stage (``gaussian-noise``, ``laplacian-noise``,
``clipping``, ``pruning``, ``quantization``). Defenses that need the minibatch (Soteria's
representation scores, DCS²'s projection onto concealed samples, DP-SGD's per-sample clipping) or change
the data or the model run in the train step (:class:`~leakshield.flower.LeakshieldTrainer`).

Each mod announces itself on the way in (the trainer then leaves that defense to the mod and reports it
among the client's defenses) and, on the way out, turns the reply into leakshield's update (FedSGD: the
gradient; FedAvg: Δθ), applies the defense's release stage with the client's release stream
(:func:`~leakshield.fl.client.release_generator`; the seed is the client's, never sent), and writes the
defended arrays back under the same key. Flower runs the last mod of the list innermost: list mods in
the reverse of the order their defenses apply (:func:`release_mods` does)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Error, Message, MessageType
from flwr.clientapp.typing import ClientAppCallable

from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.defenses.base import ClientContext, Defense, DefensePipeline, PublicDefense, create_defense
from leakshield.errors import ConfigError, LeakshieldError
from leakshield.fl.client import release_generator, seeded_generator
from leakshield.fl.types import ClientUpdate
from leakshield.flower.records import ReportedFacts, reply_state, state_of, update_from_reply

#: the ConfigRecord of the incoming message in which mods announce the defenses they apply
ANNOUNCE_RECORD = "leakshield-mods"


def is_release_only(defense: Defense) -> bool:
    """Whether ``defense`` acts on the update alone (its only stage is the release stage)."""
    kind = type(defense)
    return (
        kind.release_hook is not Defense.release_hook
        and kind.model_hook is Defense.model_hook
        and kind.data_hook is Defense.data_hook
        and not defense.replaces_gradient
        and defense.fit_scope is None
        and (kind.step_hook is Defense.step_hook or getattr(defense.params, "stage", None) == "release")
    )


def announced(message: Message) -> list[PublicDefense]:
    """The defenses the mods around the train step will apply, in the order they apply them."""
    if ANNOUNCE_RECORD not in message.content.config_records:
        return []
    entries = json.loads(str(message.content.config_records[ANNOUNCE_RECORD]["defenses"]))
    return [create_defense(e["name"], e["params"]).public_config() for e in reversed(entries)]


class ReleaseDefenseMod:
    """A leakshield release-stage defense as a Flower mod.

    name / params: the registered defense and its parameters (``leakshield list defenses``). seed: the
    client's seed (None: the run config's ``seed``, else 0); with the round and the client id it seeds
    the noise exactly as leakshield's in-process client does, so a Flower run and a leakshield
    simulation release the same update."""

    def __init__(
        self, name: str, params: Mapping[str, Any] | None = None, *, seed: int | None = None
    ) -> None:
        self.defense = create_defense(name, params)
        if not is_release_only(self.defense):
            raise ConfigError(
                f"{name}: not an update-stage defense (it needs the minibatch, the data or the model); "
                "run it in the train step (LeakshieldTrainer) instead of as a mod"
            )
        self.seed = seed

    def __repr__(self) -> str:
        return f"ReleaseDefenseMod({self.defense.name!r}, {self.defense.params.model_dump()})"

    def __call__(self, msg: Message, ctxt: Context, call_next: ClientAppCallable) -> Message:
        if msg.metadata.message_type != MessageType.TRAIN:
            return call_next(msg, ctxt)
        records = list(msg.content.array_records.values())
        if len(records) != 1:
            return error_reply(msg, f"{self!r}: expected one ArrayRecord in the message, got {len(records)}")
        sent = state_of(records[0])
        self._announce(msg)
        reply = call_next(msg, ctxt)
        if reply.has_error():
            return reply
        try:
            return self._defend(reply, sent, ctxt)
        except LeakshieldError as exc:
            return error_reply(msg, f"{self!r}: {exc}")

    def _announce(self, msg: Message) -> None:
        public = self.defense.public_config()
        entry = {"name": public.name, "params": public.params.model_dump(mode="json")}
        record = msg.content.config_records.get(ANNOUNCE_RECORD)
        entries = json.loads(str(record["defenses"])) if record is not None else []
        msg.content[ANNOUNCE_RECORD] = ConfigRecord({"defenses": json.dumps([*entries, entry])})

    def _defend(self, reply: Message, sent: dict[str, torch.Tensor], ctxt: Context) -> Message:
        facts = ReportedFacts.from_message(reply)
        key, arrays = _single_arrays(reply)
        update = update_from_reply(sent, state_of(arrays), facts)
        seed = self.seed if self.seed is not None else int(ctxt.run_config.get("seed", 0))
        defended = release_update(
            [self.defense], update, facts, seeded_generator(seed, facts.round, facts.client_id)
        )
        reply.content[key] = ArrayRecord(reply_state(sent, defended))
        return reply


_NO_DATA = ImageSet(torch.zeros(0, 1, 1, 1), torch.zeros(0, dtype=torch.long))


def release_update(
    defenses: Sequence[Defense], update: ClientUpdate, facts: ReportedFacts, generator: torch.Generator
) -> ClientUpdate:
    """``update`` (a :class:`~leakshield.fl.types.ClientUpdate` rebuilt from a reply) released through
    the release stages of ``defenses``, their noise drawn from the release stream of ``generator``, as
    leakshield's client releases it; a mod sees no data, only the reply's facts."""
    context = ClientContext(
        client_id=facts.client_id,
        round=facts.round,
        dataset=_NO_DATA,
        info=DatasetInfo(facts.dataset, (0, 0, 0), 0, facts.mean, facts.std),
        generator=release_generator(generator),
    )
    delta = DefensePipeline(list(defenses)).release_hook(update.delta, context)
    return type(update)(update.global_params, delta, update.protocol, update.buffers)


def _single_arrays(message: Message) -> tuple[str, ArrayRecord]:
    items = list(message.content.array_records.items())
    if len(items) != 1:
        raise LeakshieldError(f"expected one ArrayRecord in the reply, got {len(items)}")
    return items[0]


def error_reply(msg: Message, reason: str) -> Message:
    """An error reply to ``msg`` (the server counts it as a failed client)."""
    return Message(Error(code=0, reason=reason), reply_to=msg)


def release_mods(
    defenses: Sequence[Mapping[str, Any]], *, seed: int | None = None
) -> list[ReleaseDefenseMod]:
    """Mods for the update-stage defenses at the end of a defense stack (``[{"name", "params"}, …]``, as
    in a config's ``defenses`` entry), listed so that they apply in the stack's order; the defenses
    before them stay in the train step. Empty if the stack does not end in update-stage defenses."""
    tail: list[Mapping[str, Any]] = []
    for entry in reversed(list(defenses)):
        if not is_release_only(create_defense(entry["name"], entry.get("params"))):
            break
        tail.append(entry)
    return [ReleaseDefenseMod(e["name"], e.get("params"), seed=seed) for e in tail]
