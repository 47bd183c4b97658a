"""Which threat model an attack assumes, read off the attack itself (never a hand-kept list)."""

from __future__ import annotations

from leakshield.attacks.base import ATTACKS, Attack
from leakshield.errors import LeakshieldError

HONEST = "honest-but-curious server"
MALICIOUS_SERVER = "malicious server"
MALICIOUS_CLIENT = "malicious client"


def threat_of(attack: str) -> str:
    """``malicious client`` for a participant attack (it takes part in training), ``malicious server``
    for one that changes the model the server sends (``Attack.modifies_model``), else honest-but-curious."""
    try:
        entry = ATTACKS.get(attack)
    except LeakshieldError:  # a label that is not a registered name (e.g. a renamed column)
        return HONEST
    factory = entry.factory
    if getattr(factory, "role", None) == "participant":
        return MALICIOUS_CLIENT
    if isinstance(factory, type) and issubclass(factory, Attack) and factory.modifies_model:
        return MALICIOUS_SERVER
    return HONEST
