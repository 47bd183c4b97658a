"""Client guards: checks a client runs on the model it receives (or the update it is about to send)
before it trains or replies — the row, dominance, drift and loss guards, the probe the statistic-based
ones share, and the finite-values check all of them apply first."""

from leakshield.defenses.guards import dominance_guard, drift_guard, loss_guard, row_guard  # noqa: F401  (register)
