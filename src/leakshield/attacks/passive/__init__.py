"""Passive attacks: an honest-but-curious server that only reads the updates it receives — gradient
inversion (DLG, iDLG, IG, CPL, GradInversion), analytic recovery of a linear layer's input, and label
inference."""

from leakshield.attacks.passive import (  # noqa: F401  (register attacks)
    analytic,
    april,
    fedavg_leakage,
    fedleak,
    inversion,
    labels,
    spear,
)
