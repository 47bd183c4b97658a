"""Passive attacks: an honest-but-curious server that only reads the updates it receives — gradient
inversion (DLG, iDLG, IG, CPL, GradInversion), analytic recovery of a linear layer's input, and label
inference."""

from leakshield.attacks.passive import analytic, april, inversion, labels, spear  # noqa: F401  (register attacks)
