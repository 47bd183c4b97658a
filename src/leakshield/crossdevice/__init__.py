"""Cross-device federations: hundreds of clients, a few percent sampled per round, DP-FedAvg with
fixed or adaptive clipping and server momentum, client-level ε under both neighbouring relations, and
what the server can read from a sampled client's update at each ε."""

from functools import cache
from pathlib import Path


@cache
def code_stamp() -> str:
    """A hash of this package's source files: what a kept cross-device result was computed with (the
    package version alone stays the same across changes)."""
    from leakshield.provenance import tree_hash

    return tree_hash(Path(__file__).resolve().parent)
