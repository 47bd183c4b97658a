"""Active attacks: a malicious server that tampers with the model it sends — imprint ("Robbing the
Fed"), LOKI, trap weights, class and feature fishing, SEER — and their detection-aware variants, which
trade leakage for staying below the client guards."""

from leakshield.attacks.active import (  # noqa: F401  (register attacks)
    feature_fishing,
    fishing,
    guard_evasion,
    imprint,
    loki,
    seer,
    trap_weights,
)
