"""To whom an attack cell leaks: read off the threat model stored with the cell (the attack's declared
threat, :mod:`leakshield.threats`), never off its display label. Stores written before threats were
recorded fall back to the registered name (``attack_name``) or, last, to the label when it is itself a
registered name; anything else is said to be unknown rather than guessed."""

from __future__ import annotations

from leakshield.attacks.base import ATTACKS
from leakshield.errors import LeakshieldError
from leakshield.experiment.store import CellRecord
from leakshield.threats import WHO, Adversary, Threat

HONEST = WHO[Adversary.OBSERVING_SERVER]
MALICIOUS_SERVER = WHO[Adversary.PARAMETER_SERVER]
MALICIOUS_CLIENT = WHO[Adversary.PARTICIPANT]
UNKNOWN = "threat model not recorded"


def cell_threat(record: CellRecord) -> Threat | None:
    """The threat model ``record`` ran under, or None when it cannot be known."""
    if record.threat:
        return Threat.from_json(record.threat)
    for name in (record.attack_name, record.attack):
        if name:
            try:
                return ATTACKS.get(name).threat
            except LeakshieldError:
                continue
    return None


def configured_clients(record: CellRecord) -> int | None:
    """How many clients the cell's aggregate was *configured* to sum: its scale's ``clients=N``, else the
    ``aggregate_size`` stored with its threat; None where neither was recorded (an old store)."""
    for part in (record.scale or "").split():
        if part.startswith("clients="):
            return int(part.split("=", 1)[1])
    size = (record.threat or {}).get("aggregate_size")
    return int(size) if isinstance(size, int | float) else None


def threat_of(record: CellRecord) -> str:
    """``honest-but-curious server``, ``malicious server``, ``malicious client`` (or ``auditor``),
    followed by ``under secure aggregation`` when the cell's server was configured to see only aggregates
    of more than one client. The table follows the design, never the outcome: a guard that refused every
    update (``aggregate_clients`` 0) leaves its cell where it was configured. Only a store that recorded
    no configured size falls back to the aggregate the cell measured."""
    threat = cell_threat(record)
    if threat is None:
        return UNKNOWN
    configured = configured_clients(record)
    if configured is not None:
        single = configured <= 1
    else:
        held = record.metrics.get("aggregate_clients")
        single = isinstance(held, int | float) and held <= 1
    aggregated = (record.threat or {}).get("aggregated") and not single
    return f"{threat.who} under secure aggregation" if aggregated else threat.who
