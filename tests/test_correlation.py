"""Correlations with Fisher intervals (ATS's Fig. 5 rows): the statistics against NumPy/SciPy, and
planted cases the rule must see: a real correlation holds, none does not, a confounded one is caught by
the partial correlation, and the paper's own r over few policies is inconclusive."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from leakshield.leaderboard.correlation import Correlation, partial, pearson, ranks, spearman
from leakshield.leaderboard.verdicts import check_row, interval_row


def _script():
    from helpers import benchmark_script

    return benchmark_script("ats_correlation")


#: Fig. 5's rule as the benchmark states it: r 0.755, counting down to 0.655, against no correlation
FIG5 = _script().CLAIM


def _series(seed: int, n: int, rho: float) -> tuple[list[float], list[float]]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(n)
    b = rho * a + math.sqrt(1 - rho**2) * rng.standard_normal(n)
    return a.tolist(), b.tolist()


def _fisher(r: float, half: float) -> tuple[float, float]:
    return math.tanh(math.atanh(r) - half), math.tanh(math.atanh(r) + half)


def test_the_statistics_match_numpy_and_scipy():
    a, b = _series(0, 25, 0.6)
    c = np.random.default_rng(1).standard_normal(25).tolist()
    assert pearson(a, b).r == pytest.approx(np.corrcoef(a, b)[0, 1], abs=1e-12)
    assert spearman(a, b).r == pytest.approx(stats.spearmanr(a, b).statistic, abs=1e-12)
    # the partial correlation is the correlation of the residuals after regressing each on the control
    design = np.column_stack([np.ones(25), c])
    res = [np.asarray(v) - design @ np.linalg.lstsq(design, v, rcond=None)[0] for v in (a, b)]
    assert partial(a, b, c).r == pytest.approx(np.corrcoef(*res)[0, 1], abs=1e-10)
    assert partial(a, b, c).controls == 1
    low, high = Correlation(0.5, 20, controls=1).interval  # n − 4 degrees of freedom
    half = 1.959963984540054 / math.sqrt(16)
    assert (low, high) == pytest.approx(
        (math.tanh(math.atanh(0.5) - half), math.tanh(math.atanh(0.5) + half))
    )
    rho = spearman(a, b)  # Bonett–Wright: wider than Fisher's by √(1 + ρ²/2)
    half = 1.959963984540054 * math.sqrt((1 + rho.r**2 / 2) / 22)
    assert rho.interval == pytest.approx(
        (math.tanh(math.atanh(rho.r) - half), math.tanh(math.atanh(rho.r) + half))
    )
    low, high = pearson(a, b).interval
    z, half = math.atanh(pearson(a, b).r), 1.959963984540054 / math.sqrt(22)
    assert (low, high) == pytest.approx((math.tanh(z - half), math.tanh(z + half)))
    assert ranks([3.0, 1.0, 3.0, 2.0]) == [3.5, 1.0, 3.5, 2.0]


def test_refusals():
    with pytest.raises(ValueError, match="constant"):
        pearson([1.0, 1.0, 1.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="different lengths"):
        pearson([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="need more"):
        _ = Correlation(0.5, 4, controls=1).interval
    with pytest.raises(ValueError, match="not finite"):
        spearman([1.0, math.nan, 3.0, 4.0, 5.0], [1.0, 2.0, 3.0, 4.0, 5.0])  # ranks would hide the NaN
    with pytest.raises(ValueError, match="perfect"):
        _ = pearson([1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 4.0, 6.0, 8.0, 10.0]).interval


def test_the_benchmark_resumes_from_its_files_and_drops_a_line_cut_short(tmp_path):
    """ats_correlation.py: policies from every shard's file, in order, each once; a last line cut short
    by a crash is left out (and cut from the file on resume); another run's settings are refused."""
    import json

    script = _script()
    settings = {"victims": 16}
    out = tmp_path / "fig5.jsonl"
    header = json.dumps({"settings": settings}) + "\n"
    entry = lambda k: json.dumps({"k": k, "psnr": float(k)}) + "\n"  # noqa: E731
    (tmp_path / "fig5-0-of-2.jsonl").write_text(header + entry(0) + entry(2) + '{"k": 4, "ps')
    (tmp_path / "fig5-1-of-2.jsonl").write_text(header + entry(1) + entry(3)[:-1])  # no newline yet
    assert [e["k"] for e in script.load_all(out, settings)] == [0, 1, 2]
    shard = tmp_path / "fig5-0-of-2.jsonl"
    assert [e["k"] for e in script.load(shard, settings, repair=True)] == [0, 2]
    assert shard.read_text() == header + entry(0) + entry(2)
    with pytest.raises(SystemExit, match="other settings"):
        script.load(shard, {"victims": 3})


def _verdict(found: Correlation) -> str:
    line = interval_row("c", "cmd", FIG5, found.r, found.interval, found.n, "policies")
    _, _, measured, rule, said = (c.strip() for c in line.strip("|").split("|"))
    assert check_row(measured, rule, said) is None  # the row gives its verdict back
    return said


def test_the_rule_sees_a_correlation_none_and_a_confounded_one():
    strong = pearson(*_series(2, 40, 0.92))
    assert _verdict(strong) == "holds"
    none = pearson(*_series(3, 40, 0.0))
    assert _verdict(none) == "does not hold"
    # S_pri and the attack's PSNR both follow a third quantity (how dark the transformed image is)
    rng = np.random.default_rng(4)
    dark = rng.standard_normal(40)
    s_pri, attack = dark + 0.25 * rng.standard_normal(40), dark + 0.25 * rng.standard_normal(40)
    assert _verdict(pearson(s_pri.tolist(), attack.tolist())) == "holds"  # fooled
    assert _verdict(partial(s_pri.tolist(), attack.tolist(), dark.tolist())) == "does not hold"  # caught


def test_twelve_policies_cannot_confirm_the_papers_r():
    """At the paper's own r = 0.755, 12 policies give [0.32, 0.93]: inconclusive; it takes 99, about the
    paper's own 100, for the interval to clear 0.655."""
    assert _verdict(Correlation(0.755, 12)) == "inconclusive"
    low, high = Correlation(0.755, 12).interval
    assert low == pytest.approx(0.32, abs=0.01) and high == pytest.approx(0.93, abs=0.01)
    needed = next(n for n in range(5, 500) if Correlation(0.755, n).interval[0] >= 0.655)
    assert needed == 99
