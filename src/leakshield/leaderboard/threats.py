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


def threat_of(record: CellRecord) -> str:
    """``honest-but-curious server``, ``malicious server``, ``malicious client`` (or ``auditor``),
    followed by ``under secure aggregation`` when the cell's server saw only aggregates of more than one
    client (an aggregate of one, ``aggregate_clients`` 1, is the single update)."""
    threat = cell_threat(record)
    if threat is None:
        return UNKNOWN
    held = record.metrics.get("aggregate_clients")
    single = isinstance(held, int | float) and held <= 1
    aggregated = (record.threat or {}).get("aggregated") and not single
    return f"{threat.who} under secure aggregation" if aggregated else threat.who
