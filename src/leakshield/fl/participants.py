"""Roles in a round (docs/concepts/cell-pipeline.md, "Where state lives"): participants reply to the model the
server sent; observers are the server's eyes. An attack can be either: a server-side
:class:`RoundObserver` (it sees the model sent and every reply), or a :class:`Participant` that takes
part in training with updates of its own (e.g. the GAN attack of Hitaj et al., a malicious client).

A participant receives its own copy of the global model only; an observer receives what the server
role sees (the model as sent and the replies) and nothing a client computed privately."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from torch import nn

from leakshield.fl.types import ClientUpdate


@runtime_checkable
class Participant(Protocol):
    """A client of the federation. ``fit`` gets a model it may do anything with (it is the
    participant's own copy) and the round number, and returns its update, or None to stay silent this
    round. Optional attributes the simulation reads: ``accounted`` (count its local steps for privacy
    accounting) and ``sampling_rate``."""

    client_id: int

    def fit(self, model: nn.Module, round: int) -> ClientUpdate | None: ...


class RoundObserver:
    """Server-side hooks, all no-ops by default. ``model`` is a copy of the global model as the server
    sent it that round; ``update`` a participant's reply as the server received it."""

    def round_started(self, round: int, model: nn.Module) -> None:
        """Before any participant computes."""

    def update_received(self, round: int, client_id: int, update: ClientUpdate) -> None:
        """For every reply, in client order."""

    def round_finished(self, round: int, model: nn.Module) -> None:
        """After aggregation (``model`` is the new global model, a copy)."""
