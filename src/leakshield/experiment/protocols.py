"""Cell protocols, registered: how a cell of each kind turns the world of a run into numbers.

A protocol is a function ``(world, cell) -> CellOutput``. The pipeline picks one by the cell's kind and,
for an attack cell, by the attack's declared threat (:class:`leakshield.threats.Threat`), never by its
class: ``baseline`` (the no-information reconstruction), ``utility`` (FL training → accuracy),
``server-attack`` (a server observes, or prepares, the model and attacks the victims' updates),
``participant-attack`` (a malicious client trains inside the federation; the evaluator scores what it
releases), ``detection`` (a client guard judges models prepared by model-modifying attacks and honest
models of a whole federation)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from leakshield.errors import LeakshieldError
from leakshield.experiment.evaluation import CellOutput
from leakshield.threats import Adversary, Threat

if TYPE_CHECKING:
    from leakshield.experiment.cells import Cell
    from leakshield.experiment.world import ExperimentContext

__all__ = ["CELL_PROTOCOLS", "CellOutput", "protocol_for_threat", "protocol_of", "register_protocol"]

Protocol = Callable[["ExperimentContext", "Cell"], CellOutput]

#: protocol name → (function, one-line summary)
CELL_PROTOCOLS: dict[str, tuple[Protocol, str]] = {}


def register_protocol(name: str, summary: str) -> Callable[[Protocol], Protocol]:
    """Register a cell protocol under ``name``."""

    def decorator(function: Protocol) -> Protocol:
        if name in CELL_PROTOCOLS:
            raise ValueError(f"cell protocol {name!r} is registered twice")
        CELL_PROTOCOLS[name] = (function, summary)
        return function

    return decorator


def protocol_for_threat(threat: Threat) -> str:
    """The protocol of an attack cell: a participant trains inside the federation; every server role
    (observing, or changing the parameters or the architecture it sends) attacks victims' updates."""
    return "participant-attack" if threat.adversary is Adversary.PARTICIPANT else "server-attack"


def protocol_of(cell: Cell, threat: Threat | None) -> str:
    """The protocol name of ``cell``; ``threat`` is the attack's (attack cells only)."""
    if cell.kind != "attack":
        return cell.kind
    if threat is None:
        raise LeakshieldError(f"attack cell {cell.describe()} has no threat model")
    return protocol_for_threat(threat)
