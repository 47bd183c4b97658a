"""A finding of the DP settings checker: one line, what is wrong, where, and the fix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Level = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class Finding:
    """``error``: the setting cannot deliver the DP it claims; ``warning``: it may not, or its ε is
    easy to misreport; ``info``: what the guarantee is (unit, adjacency, sampling)."""

    level: Level
    where: str
    message: str
    fix: str = ""

    def line(self) -> str:
        """``level: where: message — fix: …`` on one line."""
        fix = f" — fix: {self.fix}" if self.fix else ""
        return f"{self.level}: {self.where}: {self.message}{fix}"


def has_errors(findings: list[Finding]) -> bool:
    """Whether any finding is an error (the checker's exit status)."""
    return any(f.level == "error" for f in findings)
