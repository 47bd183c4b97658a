"""Does a federation's DP do what it says? A canary audit of a run (Andrew et al. 2024's one-shot ε
estimate and Steinke et al. 2023's one-run lower bound, beside the accountant's ε) and a checker of DP
settings in leakshield configs and Flower apps."""

from functools import cache
from pathlib import Path


@cache
def code_stamp() -> str:
    """A hash of this package's and the cross-device package's sources: what a kept audit was computed
    with (the package version alone stays the same across changes)."""
    from leakshield.crossdevice import code_stamp as federation_stamp
    from leakshield.provenance import tree_hash

    return f"{federation_stamp()}+{tree_hash(Path(__file__).resolve().parent)}"
