"""The ``none`` defense: the undefended baseline every table compares against."""

from __future__ import annotations

from leakshield.defenses.base import DEFENSES, Defense
from leakshield.registry import NoParams


@DEFENSES.register(
    "none",
    summary="no defense: the client shares its plain update",
    reference="baseline",
)
class NoDefense(Defense):
    """Every stage is the identity."""

    name = "none"

    def __init__(self, params: NoParams) -> None:
        super().__init__(params)
