"""The client guard stage as a Flower mod: ahead of the train step, the client judges the model it
received before it trains on private data, and refuses it with an error reply the server sees as a
failed client (its reason one line) — no update leaves the client.

Two checks: the arrays must form the architecture the federation agreed on (the config's model with
the defenses' model stage: same names, shapes and dtypes — a server that changes the architecture,
e.g. prepends an imprint block, is refused here), then the configured defense stack's guards judge the
model (:meth:`leakshield.defenses.base.Defense.inspect`, e.g. ``row-guard``; each refuses a model
with a non-finite entry first). A message the mod cannot place (no or an unknown ``partition-id``, no
server round) is answered with an error reply too: the mod never raises into the ClientApp. The stack
must hold at least one guard, each at most once (refused when the mod is made). A guard that compares
rounds (``drift-guard``) gets the last model the client accepted through this mod, kept in memory for
as long as the ClientApp's process lives (a SuperNode that restarts it starts over: the first model
after a restart has nothing to compare with). List it *last* among the ClientApp's mods so that it
runs innermost, right before the train step."""

from __future__ import annotations

from flwr.app import Context, Message, MessageType
from flwr.clientapp.typing import ClientAppCallable
from torch import nn

from leakshield.defenses import DEFENSES, DefensePipeline
from leakshield.errors import ConfigError, LeakshieldError
from leakshield.flower.client import LeakshieldTrainer, partition_id, server_round
from leakshield.flower.mods import error_reply
from leakshield.flower.records import state_of


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]


def stack_guards(trainer: LeakshieldTrainer) -> list[str]:
    """The guards of the trainer's defense stack (``defenses[0]``), in order; refuses a stack without
    one and a guard listed twice (one ConfigError line naming the stack and the guards there are)."""
    setting = trainer.config.defenses[0]
    names = [d.name for d in DefensePipeline.from_config(setting.entries).defenses if d.guards]
    known = ", ".join(e.name for e in DEFENSES if getattr(e.factory, "guards", False))
    if not names:
        raise ConfigError(f"GuardMod: defenses[0] ({setting.display}) has no client guard, so the mod would "
                          f"accept every model; add one ({known}) or leave the mod out")  # fmt: skip
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"GuardMod: defenses[0] ({setting.display}) lists {', '.join(twice)} more than "
                          "once; a guard judges a model once (keep the stricter setting)")  # fmt: skip
    return names


class GuardMod:
    """Refuse a received model that is not the agreed architecture or that the configured guards
    refuse; ``trainer``: the node's :class:`LeakshieldTrainer` (its config and federation)."""

    def __init__(self, trainer: LeakshieldTrainer) -> None:
        self.trainer = trainer
        #: the guards that judge each model, in order (at least one, each once)
        self.guards = stack_guards(trainer)
        #: (round, client, reason) of every refusal this mod made (observable in-process)
        self.refusals: list[tuple[int, int, str]] = []
        #: per client, the last model it accepted, kept when a guard compares rounds (``drift-guard``),
        #: for as long as this ClientApp process lives
        self.accepted: dict[int, nn.Module] = {}

    def __call__(self, msg: Message, ctxt: Context, call_next: ClientAppCallable) -> Message:
        if msg.metadata.message_type != MessageType.TRAIN:
            return call_next(msg, ctxt)
        client_id, round_ = -1, -1
        try:
            client_id, round_ = partition_id(ctxt), server_round(msg)
            reason = self._judge(msg, ctxt, client_id, round_)
        except LeakshieldError as exc:  # a message the mod cannot place: an error reply, never a raise
            where = ctxt.node_config.get("partition-id", "?")
            self.refusals.append((round_, client_id, str(exc)))
            return error_reply(msg, f"client {where} refused the message: {exc}")
        except Exception as exc:  # a model the guards cannot judge is not trained on
            reason = (
                f"the model could not be judged ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
            )
        if reason:
            self.refusals.append((round_, client_id, reason))
            return error_reply(msg, f"client {client_id} refused the model of round {round_}: {reason}")
        return call_next(msg, ctxt)

    def _judge(self, msg: Message, ctxt: Context, client_id: int, round_: int) -> str:
        """Why the model of ``msg`` is refused ('' when it is accepted)."""
        clients = self.trainer.config.fl.clients
        if not 0 <= client_id < clients:
            raise ConfigError(
                f"partition-id {client_id} is not a client of the federation (0..{clients - 1}, fl.clients)"
            )
        fed = self.trainer.federation(client_id, self.trainer.seed_for(ctxt))
        records = list(msg.content.array_records.values())
        if len(records) != 1:
            return f"expected one ArrayRecord in the message, got {len(records)}"
        try:
            sent = state_of(records[0])
        except Exception as exc:  # whatever bytes a message holds, reading them must not raise
            return f"its arrays cannot be read ({type(exc).__name__}: {_short(exc)})"
        model = fed.fresh_model()
        agreed = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        received = {k: tuple(v.shape) for k, v in sent.items()}
        if received != agreed:
            extra, missing = sorted(set(received) - set(agreed)), sorted(set(agreed) - set(received))
            return (f"the model received is not the agreed architecture (extra: {extra[:3]}, missing: "
                    f"{missing[:3]}, or other shapes)")  # fmt: skip
        types = {k: v.dtype for k, v in model.state_dict().items()}
        wrong = [k for k, v in sent.items() if v.dtype != types[k]]
        if wrong:
            more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
            return (f"the model received has other dtypes than the agreed architecture: {wrong[0]!r} is "
                    f"{sent[wrong[0]].dtype}, agreed {types[wrong[0]]}{more}")  # fmt: skip
        model.load_state_dict(sent)
        client = fed.client(client_id)
        previous = self.accepted.get(client_id)
        verdict = client.inspect(model, round_, client.generator(round_, fed.device), previous)
        if verdict.accepted and client.pipeline.needs_previous:
            self.accepted[client_id] = model
        return verdict.reason
