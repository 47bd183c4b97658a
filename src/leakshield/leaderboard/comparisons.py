"""Rows compared over seeds: each defense against no defense, and every pair for a letter display.

The unit is the seed: a row's per-seed value is the mean over that seed's victims of their margins
(:mod:`.margin`), and two rows are paired by seed (the same model, client and victims in a seed).

* **Against no defense** (the question users ask: "does it leak less than none, and by how much?"):
  a one-sided paired t-test over seeds (H₁: the defense's mean margin is below no defense's), Holm's
  step-down correction over the table's rows at :data:`ALPHA_VERSUS_NONE`, and the difference from no
  defense with a simultaneous interval (Bonferroni, two-sided at 1 − 2α/k: its upper end is below 0
  exactly when the one-sided test rejects at Holm's first step).
* **Every pair** (the compact letter display): two-sided paired t-tests, Holm over all k(k − 1)/2 pairs
  at :data:`ALPHA_PAIRS`; letters by the insert-and-absorb algorithm of Piepho (2004, *J. Comput. Graph.
  Stat.* 13(2)): rows sharing a letter were not shown different.

Where the paired differences have no spread (every seed the same difference) the t statistic is
undefined: the p-value is then the exact sign-flip permutation p over the 2^S sign patterns (Fisher's
randomisation test) — 1/2^S one-sided for a difference equal and non-zero in every seed (1/256 at 8
seeds), 1 for none at all — never 0.

α: best-of-K selection (the strongest of a row's K attack cells, chosen on the same seeds that stage 2
reruns) inflates the family-wise error: through this code, in a simulation built from the standard
export's variance components, α 0.035 gave 0.067–0.077 against no defense and α 0.02 gives 0.040 (300
tables); ``tests/test_ranking_error_rates.py`` holds it at or below 0.05.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

#: Holm's family-wise level for the tests against no defense (calibrated for best-of-K selection)
ALPHA_VERSUS_NONE = 0.02
#: Holm's family-wise level over all pairs (the letter display)
ALPHA_PAIRS = 0.02
#: spread below which paired differences count as equal (per-seed means of 3-decimal margins differ
#: by at least 1e-3 / victims when they differ at all)
_NO_SPREAD = 1e-9


def sign_flip_p(differences: Sequence[float], *, one_sided: bool) -> float:
    """The exact sign-flip permutation p of the mean of ``differences`` (H₁: mean < 0 when
    ``one_sided``, ≠ 0 otherwise): the share of the 2^S sign patterns whose mean is at least as extreme."""
    values = [float(d) for d in differences]
    observed = sum(values) / len(values)
    count = 0
    patterns = list(itertools.product((1.0, -1.0), repeat=len(values)))
    for signs in patterns:
        mean = sum(s * abs(v) for s, v in zip(signs, values, strict=True)) / len(values)
        if one_sided:
            count += mean <= observed + _NO_SPREAD
        else:
            count += abs(mean) >= abs(observed) - _NO_SPREAD
    return count / len(patterns)


def paired_p(a: Sequence[float], b: Sequence[float], *, one_sided: bool) -> float:
    """The paired t-test's p of ``a`` against ``b`` over the same seeds (H₁: a < b when ``one_sided``,
    a ≠ b otherwise); differences without spread take the exact sign-flip p; fewer than two pairs, 1."""
    from scipy.stats import t

    differences = [x - y for x, y in zip(a, b, strict=True)]
    n = len(differences)
    if n < 2:
        return 1.0
    mean = sum(differences) / n
    variance = sum((d - mean) ** 2 for d in differences) / (n - 1)
    if math.sqrt(variance) <= _NO_SPREAD:
        return 1.0 if abs(mean) <= _NO_SPREAD else sign_flip_p(differences, one_sided=one_sided)
    statistic = mean / math.sqrt(variance / n)
    return float(t.cdf(statistic, n - 1)) if one_sided else float(2 * t.sf(abs(statistic), n - 1))


def holm(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Holm's step-down rejections of ``p_values`` (family-wise error ≤ ``alpha``), in input order."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    for step, i in enumerate(order):
        if p_values[i] > alpha / (len(p_values) - step):
            break
        rejected[i] = True
    return rejected


@dataclass(frozen=True)
class Difference:
    """A row's mean margin minus no defense's over their common seeds, with its simultaneous interval,
    the one-sided p and whether Holm's procedure rejected "no less than no defense"."""

    mean: float
    low: float
    high: float
    p: float
    seeds: int
    less: bool = False

    def text(self) -> str:
        """``−0.214 [−0.301, −0.127] *`` (``*``: leaks less than no defense, Holm-corrected)."""
        mark = " *" if self.less else ""
        if self.seeds < 2:
            return f"{_signed(self.mean)} (one seed: no interval)"
        if self.low == self.high:  # no spread: no t-interval; the exact sign-flip p says what it can
            return f"{_signed(self.mean)} in each of {self.seeds} seeds (exact p {self.p:.4f}){mark}"
        return f"{_signed(self.mean)} [{_signed(self.low)}, {_signed(self.high)}]{mark}"


def _signed(value: float) -> str:
    return f"{value:+.3f}".replace("-", "−")


def difference(a: Sequence[float], b: Sequence[float], family: int, alpha: float) -> Difference:
    """``a`` − ``b`` (paired per seed) with its two-sided interval at 1 − 2 ``alpha`` / ``family``
    (Student's t, df = seeds − 1) and the one-sided p of H₁: a < b."""
    from scipy.stats import t

    differences = [x - y for x, y in zip(a, b, strict=True)]
    n = len(differences)
    mean = sum(differences) / n if n else 0.0
    p = paired_p(a, b, one_sided=True)
    if n < 2:
        return Difference(mean, mean, mean, p, n)
    sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / (n - 1))
    if sd <= _NO_SPREAD:
        return Difference(mean, mean, mean, p, n)
    half = float(t.ppf(1 - alpha / max(family, 1), n - 1)) * sd / math.sqrt(n)
    return Difference(mean, max(-1.0, mean - half), min(1.0, mean + half), p, n)


def versus_reference(
    rows: Sequence[dict[int, float]], reference: dict[int, float], alpha: float = ALPHA_VERSUS_NONE
) -> list[Difference]:
    """Each row's per-seed values (seed → value) against ``reference``'s on their common seeds: the
    difference, its simultaneous interval over the ``len(rows)`` comparisons, and Holm's decision."""
    found = []
    for row in rows:
        common = sorted(set(row) & set(reference))
        found.append(difference([row[s] for s in common], [reference[s] for s in common], len(rows), alpha))
    rejected = holm([d.p for d in found], alpha)
    return [dataclasses.replace(d, less=less) for d, less in zip(found, rejected, strict=True)]


def pairwise_different(
    rows: Sequence[dict[int, float]], alpha: float = ALPHA_PAIRS, groups: Sequence[object] | None = None
) -> set[tuple[int, int]]:
    """The pairs (i, j), i < j, of ``rows`` shown different: two-sided paired tests over their common
    seeds, Holm over all pairs tested (``groups``: only rows of the same group are paired and tested)."""
    pairs = [(i, j) for i, j in itertools.combinations(range(len(rows)), 2)
             if groups is None or groups[i] == groups[j]]  # fmt: skip
    p_values = []
    for i, j in pairs:
        common = sorted(set(rows[i]) & set(rows[j]))
        p_values.append(paired_p([rows[i][s] for s in common], [rows[j][s] for s in common], one_sided=False))
    return {pair for pair, rejected in zip(pairs, holm(p_values, alpha), strict=True) if rejected}


def letter_display(count: int, different: set[tuple[int, int]]) -> list[str]:
    """Compact letters for ``count`` rows (in display order) given the pairs shown ``different``:
    Piepho's insert-and-absorb; rows sharing a letter were not shown different. Letters follow the
    display order (the first row's group is ``a``)."""
    if count == 0:
        return []
    groups: list[set[int]] = [set(range(count))]
    for i, j in sorted(different):
        split = []
        for group in groups:
            if i in group and j in group:
                split += [group - {i}, group - {j}]
            else:
                split.append(group)
        # absorb: a group contained in another adds nothing
        groups = [g for k, g in enumerate(split) if g and not any(
            (g < h) or (g == h and m < k) for m, h in enumerate(split))]  # fmt: skip
    groups.sort(key=lambda g: (min(g), sorted(g)))
    names = [_letter(k) for k in range(len(groups))]
    return ["".join(n for n, g in zip(names, groups, strict=True) if row in g) for row in range(count)]


def _letter(k: int) -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyz"
    return alphabet[k] if k < 26 else alphabet[k // 26 - 1] + alphabet[k % 26]
