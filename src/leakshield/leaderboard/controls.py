"""The positive control of a threat table: it ranks its defenses only if its strongest attack leaks the
*undefended* row measurably. A table whose attack reconstructs nothing from no defense measures the
attack's budget, not the defenses: every defense would tie with no defense at "no measurable leakage".

The undefended row's strongest attack (stage 2's rerun on fresh victims where it ran) passes when both
hold:

1. **it beats the no-information guess over seeds**: per seed, the mean over its victims of SSIM minus
   the victim's own no-information score (not clipped at 0; a class-level score has no reference, so
   its score itself), and a one-sided t-test over seeds that this mean is above 0 rejects at
   :data:`~.comparisons.ALPHA_VERSUS_NONE` (the exact sign-flip p where the seeds do not spread);
2. **it leaks some victim**: some victim's SSIM is at least 0.6 and above its own reference
   (:func:`.leak_rate.victim_leaked`), the leaderboard's definition of a leak.

Below 6 seeds the test cannot establish a leak: where the seeds do not spread (an exact attack, the
same gain in every seed) its sign-flip p is at least 1/2^S (1/4 at 2 seeds), and where they spread a
t-test at 1 degree of freedom needs t > 15.9 — the standard export's leak level failed it in most
2-seed tables. There the control checks (2) alone and says so: a table whose attack leaks no victim of
no defense ranks nothing at any number of seeds, but a guess that crosses SSIM 0.6 by chance passes
(with references near 0.65: 200 of 200 simulated 2-seed tables). A table without a no-defense row, or
with fewer than two seeds, has no control; it is ranked and says so. The false-pass rate (an attack at the
guess level) and the power are measured through this code by :func:`.error_rates.control_passes`
(``tests/test_defenses_at_equal_cost.py``, ``benchmarks/ranking_error_rates.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from leakshield.leaderboard.comparisons import ALPHA_VERSUS_NONE, paired_p


@dataclass(frozen=True)
class Control:
    """The undefended row's strongest attack against the guess: one-sided p over seeds, whether a victim
    leaked, and the verdict."""

    where: str
    seeds: int
    gain: float
    p: float
    leaked: bool
    alpha: float = ALPHA_VERSUS_NONE

    @property
    def testable(self) -> bool:
        """Whether the seeds are enough for the test to establish a leak: the exact p's floor 1/2^S at
        most α (with fewer, an exact attack can never pass, and a t-test at S − 1 degrees of freedom
        needs t > 15.9 at 2 seeds: a real leak with seed-to-seed spread would fail too)."""
        return 0.5**self.seeds <= self.alpha

    @property
    def seeds_needed(self) -> int:
        """The fewest seeds at which the exact p can reach α."""
        return math.ceil(math.log2(1 / self.alpha))

    @property
    def passes(self) -> bool:
        return self.leaked and (self.p <= self.alpha or not self.testable)

    def text(self) -> str:
        """``ig@0 leaks no defense: gain 0.512 over the guess, p 0.0004 over 8 seeds`` or why it does not."""
        found = f"gain {self.gain:+.3f} over the guess, one-sided p {self.p:.2g} over {self.seeds} seeds"
        if self.passes and self.p > self.alpha:  # below the seeds the test needs: the leak alone
            return (
                f"the strongest attack ({self.where}) leaks some victim of no defense ({found}; below "
                f"{self.seeds_needed} seeds the test cannot establish a leak at α {self.alpha}, so only "
                "the leak is checked)"
            )
        if self.passes:
            return f"the strongest attack ({self.where}) leaks no defense: {found}"
        why = "no victim reached SSIM 0.6 above its own guess" if not self.leaked else (
            f"not above the guess at α {self.alpha}")  # fmt: skip
        return (
            f"the strongest attack ({self.where}) does not leak no defense measurably ({why}; {found}): "
            "this table measures the attack's budget, not the defenses, and ranks nothing"
        )


def control(row: Any, alpha: float = ALPHA_VERSUS_NONE) -> Control | None:
    """The positive control of the undefended ``row`` (a :class:`~.ranking.Standing`); None where it
    has no attack score with per-seed outcomes or fewer than two seeds."""
    best = row.strongest
    if best is None or len(best.outcomes) < 2:
        return None
    gains = [o.gain for o in best.outcomes]
    p = paired_p([0.0] * len(gains), gains, one_sided=True)
    leaked = any(o.leaked for o in best.outcomes)
    return Control(best.where, len(gains), sum(gains) / len(gains), p, leaked, alpha)
