"""The client guard stage as a Flower mod: ahead of the train step, the client judges the model it
received before it trains on private data, and refuses it with an error reply the server sees as a
failed client (its reason one line) — no update leaves the client.

Two checks: the arrays must form the architecture the federation agreed on (the config's model with
the defenses' model stage: same names and shapes — a server that changes the architecture, e.g.
prepends an imprint block, is refused here), then the configured defense stack's guards judge the
model (:meth:`leakshield.defenses.base.Defense.inspect`, e.g. ``row-guard``). A guard that compares
rounds (``drift-guard``) gets the last model the client accepted through this mod, kept in memory for
as long as the ClientApp's process lives (a SuperNode that restarts it starts over: the first model
after a restart has nothing to compare with). List it *last* among the ClientApp's mods so that it
runs innermost, right before the train step."""

from __future__ import annotations

from flwr.app import Context, Message, MessageType
from flwr.clientapp.typing import ClientAppCallable
from torch import nn

from leakshield.flower.client import LeakshieldTrainer, partition_id, server_round
from leakshield.flower.mods import error_reply
from leakshield.flower.records import state_of


class GuardMod:
    """Refuse a received model that is not the agreed architecture or that the configured guards
    refuse; ``trainer``: the node's :class:`LeakshieldTrainer` (its config and federation)."""

    def __init__(self, trainer: LeakshieldTrainer) -> None:
        self.trainer = trainer
        #: (round, client, reason) of every refusal this mod made (observable in-process)
        self.refusals: list[tuple[int, int, str]] = []
        #: per client, the last model it accepted, kept when a guard compares rounds (``drift-guard``),
        #: for as long as this ClientApp process lives
        self.accepted: dict[int, nn.Module] = {}

    def __call__(self, msg: Message, ctxt: Context, call_next: ClientAppCallable) -> Message:
        if msg.metadata.message_type != MessageType.TRAIN:
            return call_next(msg, ctxt)
        client_id, round_ = partition_id(ctxt), server_round(msg)
        fed = self.trainer.federation(client_id, self.trainer.seed_for(ctxt))
        records = list(msg.content.array_records.values())
        reason = ""
        if len(records) != 1:
            reason = f"expected one ArrayRecord in the message, got {len(records)}"
        else:
            sent = state_of(records[0])
            model = fed.fresh_model()
            agreed = {k: tuple(v.shape) for k, v in model.state_dict().items()}
            received = {k: tuple(v.shape) for k, v in sent.items()}
            if received != agreed:
                extra, missing = sorted(set(received) - set(agreed)), sorted(set(agreed) - set(received))
                reason = (
                    f"the model received is not the agreed architecture (extra: {extra[:3]}, missing: "
                    f"{missing[:3]}, or other shapes)"
                )
            else:
                model.load_state_dict(sent)
                client = fed.client(client_id)
                previous = self.accepted.get(client_id)
                verdict = client.inspect(model, round_, client.generator(round_, fed.device), previous)
                reason = verdict.reason
                if verdict.accepted and client.pipeline.needs_previous:
                    self.accepted[client_id] = model
        if reason:
            self.refusals.append((round_, client_id, reason))
            return error_reply(msg, f"client {client_id} refused the model of round {round_}: {reason}")
        return call_next(msg, ctxt)
