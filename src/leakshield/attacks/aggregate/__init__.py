"""Attacks on a secure aggregate: a passive server that sees only the sum of its clients' updates —
the Cocktail Party Attack and label counts (iLRG)."""

from leakshield.attacks.aggregate import cocktail_party, label_counts  # noqa: F401  (register attacks)
