"""The reproduction rows' verdicts: holds / does not hold / inconclusive / not run here from a measured
interval, the row format, and the reproductions page's rows checked against their own numbers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from leakshield.leaderboard.verdicts import Claim, check_row, measured_verdict, row, verdict

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reproductions.md"

#: a defense that cuts SSIM from 1.0 to the paper's 0.15 (± 0.1); the null is no cut at all
CUT = Claim(paper=0.15, tolerance=0.1, null=1.0)
#: the same claim, where a stronger cut than the paper's also counts
CUT_AT_LEAST = Claim(paper=0.15, tolerance=0.1, null=1.0, one_sided=True)


def test_each_verdict_from_an_interval():
    assert verdict(CUT, 0.10, 0.20, n=3) == "holds"
    assert verdict(CUT, 0.05, 0.25, n=3) == "holds"  # the region's edges count
    assert verdict(CUT, 0.30, 0.60, n=3) == "does not hold"  # a cut, but not the paper's size
    assert verdict(CUT, 0.95, 1.00, n=3) == "does not hold"  # no cut
    assert verdict(CUT, 0.20, 1.00, n=3) == "inconclusive"  # cannot tell the paper from no effect
    assert verdict(CUT, 0.20, 0.40, n=3) == "inconclusive"  # crosses the region's edge
    assert verdict(CUT, None, None, n=0) == "not run here"
    assert verdict(CUT, 0.00, 0.04, n=3) == "does not hold"  # two-sided: a stronger cut is another size
    assert verdict(CUT_AT_LEAST, 0.00, 0.04, n=3) == "holds"  # one-sided: it counts


def test_a_vaguer_interval_never_reads_better_than_a_tighter_one():
    """An interval that reaches further from the paper cannot hold where a tighter one does not."""
    assert verdict(CUT, 0.26, 0.60, n=3) == "does not hold"
    assert verdict(CUT, 0.24, 0.99, n=3) == "inconclusive"
    assert verdict(CUT, 0.12, 0.99, n=3) == "inconclusive"


def test_one_measurement_is_never_more_than_inconclusive():
    assert verdict(CUT, 0.18, 0.18, n=1) == "inconclusive"
    assert verdict(CUT, 0.90, 0.90, n=1) == "inconclusive"
    found, said = measured_verdict(CUT, [0.18])
    assert found.n == 1 and said == "inconclusive"


def test_a_claim_of_no_cost_denies_a_stated_cost():
    """DCS² 'costs no accuracy': the drop is the paper's 0.6 points ± 2, the null a 5-point cost; a gain
    counts as no cost when the claim is one-sided."""
    no_cost = Claim(paper=0.006, tolerance=0.02, null=0.05, one_sided=True)
    assert verdict(no_cost, 0.00, 0.02, n=3) == "holds"
    assert verdict(no_cost, -0.05, -0.02, n=3) == "holds"
    assert verdict(no_cost, 0.01, 0.07, n=3) == "inconclusive"
    assert verdict(no_cost, 0.04, 0.09, n=3) == "does not hold"


def test_a_wide_interval_is_inconclusive_not_a_hold():
    """The case a verdict must see: two seeds of three show the paper's cut, one shows none. The
    interval over three seeds reaches the null."""
    found, said = measured_verdict(CUT, [0.12, 0.18, 1.0])
    assert found.n == 3 and found.low < 0.15 and found.high >= 1.0
    assert said == "inconclusive"
    found, said = measured_verdict(CUT, [0.12, 0.18, 0.15])
    assert said == "holds" and found.high < 0.25


def test_claims_and_intervals_are_validated():
    with pytest.raises(ValueError, match="null"):
        Claim(paper=0.15, tolerance=0.1, null=0.2)  # the null inside the paper's region
    with pytest.raises(ValueError, match="tolerance"):
        Claim(paper=0.15, tolerance=-0.1, null=1.0)
    with pytest.raises(ValueError, match="interval"):
        verdict(CUT, 0.5, 0.2, n=3)
    with pytest.raises(ValueError, match="non-finite"):
        measured_verdict(CUT, [0.1, float("nan")])


def test_a_row_states_its_interval_n_rule_and_verdict_and_is_checked_back():
    text = row("PRECODE stops IG", "`leakshield run configs/x.yaml`", CUT, [0.12, 0.18, 0.15])
    cells = [c.strip() for c in text.strip("|").split("|")]
    assert cells[2].startswith("0.150 [") and cells[2].endswith("n = 3")
    assert cells[3] == "0.15 ± 0.1 · null 1" and cells[4] == "holds"
    assert check_row(cells[2], cells[3], cells[4]) is None
    assert "give 'holds'" in check_row(cells[2], cells[3], "does not hold")
    assert check_row("0.5, n = 1", cells[3], "inconclusive") is None
    assert "needs" in check_row("0.5, n = 3", cells[3], "inconclusive")
    assert "not one of" in check_row(cells[2], cells[3], "holds here")
    assert "does not start" in check_row("about 0.15", cells[3], "holds")
    assert "neither" in check_row(cells[2], "about 0.15", "holds")
    one_sided = row("a cut", "`cmd`", CUT_AT_LEAST, [0.01, 0.02, 0.03])
    cells = [c.strip() for c in one_sided.strip("|").split("|")]
    assert cells[3] == "≤ 0.25 · null 1" and cells[4] == "holds"
    assert check_row(cells[2], cells[3], cells[4]) is None
    skipped = row("at the paper's scale", "`leakshield run configs/y.yaml`", CUT, None, "estimated 32 h")
    cells = [c.strip() for c in skipped.strip("|").split("|")]
    assert cells[2:] == ["not run here (estimated 32 h)", "0.15 ± 0.1 · null 1", "not run here"]
    assert check_row(*cells[2:]) is None


def test_rows_are_judged_at_the_precision_they_print():
    """An interval end within rounding of the region's edge gets the verdict its printed numbers give:
    0.2504 prints as 0.250, inside 0.15 ± 0.1; 0.2506 prints as 0.251, outside."""
    assert verdict(CUT, 0.10, 0.2504, n=3) == "holds"
    assert check_row("0.175 [0.100, 0.250], n = 3", CUT.text(), "holds") is None
    assert verdict(CUT, 0.10, 0.2506, n=3) == "inconclusive"
    assert check_row("0.175 [0.100, 0.251], n = 3", CUT.text(), "inconclusive") is None


def _table_rows(text: str) -> list[tuple[list[str], list[str]]]:
    """(lower-cased header, cells) of every data row of every markdown table in ``text``."""
    rows, header = [], None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = [c.lower() for c in cells]
        elif not re.fullmatch(r"-+", cells[0].replace(":", "")):
            rows.append((header, cells))
    return rows


def _rule_rows(text: str) -> list[tuple[str, str, str, str]]:
    """(claim, measured, rule, verdict) of every table whose header has a 'rule' column."""
    rows = []
    for header, cells in _table_rows(text):
        if any(h.startswith("rule") for h in header):
            assert len(cells) == len(header), f"a row of a rule table has {len(cells)} cells: {cells[0][:80]}"
            named = dict(zip(header, cells, strict=True))
            rule = next(v for k, v in named.items() if k.startswith("rule"))
            measured = next(v for k, v in named.items() if k.startswith("measured"))
            said = next(v for k, v in named.items() if k.startswith("verdict"))
            rows.append((cells[0], measured, rule, said))
    return rows


def test_the_reproductions_page_rows_follow_their_numbers():
    rows = _rule_rows(PAGE.read_text(encoding="utf-8"))
    assert len(rows) >= 3  # the page has rows in the format
    checked = [(claim[:60], check_row(measured, rule, said)) for claim, measured, rule, said in rows]
    wrong = [(claim, why) for claim, why in checked if why]
    assert not wrong, wrong


def _rows_script():
    from helpers import benchmark_script

    return benchmark_script("reproduction_rows")


def test_the_rows_script_reads_per_seed_victim_scores_and_paired_drops(tmp_path):
    """benchmarks/reproduction_rows.py: per seed, one score per victim (its sensitive image, or the mean
    of its batch), the cell picked by model and round, the accuracy lost paired by seed, refusals for
    what it cannot read honestly, and an extract that gives the same scores back."""
    from leakshield.experiment import ExperimentRunner, ResultStore, parse_config

    from helpers import tiny_config

    rows = _rows_script()
    rule = {"sensitive": "fraction", "fraction": 0.25, "seed": 0}
    runs = {}
    for seeds in ([0], [0, 1]):
        cfg = parse_config(
            tiny_config(
                seeds=seeds,
                attack={"rounds": [0, 1] if len(seeds) == 1 else [0], "update": {"algorithm": "fedsgd"}},
                victims={"count": 2, "batch_size": 2, "seed": 0, "sensitive": 1},
                metrics={"sensitive": rule},
                defenses=["none", {"name": "pruning", "ratio": 0.9}],
                attacks=[{"name": "ig", "iterations": 5}],
            )
        )
        out = runs[len(seeds)] = tmp_path / f"seeds{len(seeds)}"
        assert ExperimentRunner(cfg, out, device="cpu", progress=False).run().failed == 0
    records = ResultStore(runs[1] / "results.sqlite").records()
    for at in (0, 1):
        cell = next(r for r in records if r.kind == "attack" and r.defense == "pruning" and r.round == at)
        sensitive = rows.seed_scores(runs[1], "pruning", "ig", at_round=at, sensitive=True, model="lenet")
        assert sensitive == {0: [v["ssim"][1] for v in cell.victims]}  # the second image is the sensitive one
        everything = rows.seed_scores(runs[1], "pruning", "ig", at_round=at)
        assert everything == {0: [sum(v["ssim"]) / 2 for v in cell.victims]}
    assert rows.seed_scores(runs[1], "pruning", "ig", at_round=0) != everything  # the rounds differ
    with pytest.raises(SystemExit, match="no ig · pruning · smlp cell"):
        rows.seed_scores(runs[1], "pruning", "ig", model="smlp")
    with pytest.raises(SystemExit, match="does not leak"):
        rows.undefended(runs[1], "ig", at_round=0)  # five IG steps recover nothing
    with pytest.raises(SystemExit, match="several models or rounds per seed"):
        rows.seed_scores(runs[1], "pruning", "ig")  # two rounds
    two = rows.seed_scores(runs[2], "pruning", "ig")
    assert sorted(two) == [0, 1] and two[0] != two[1]  # a seed draws the model the same victims meet
    assert rows.mean_of_seeds(two) == pytest.approx(sum(sum(v) / len(v) for v in two.values()) / 2)
    extract = rows.export(runs[2], tmp_path / "stores")
    rows._records.cache_clear()
    assert rows.seed_scores(tmp_path / "stores" / "seeds2", "pruning", "ig") == two
    assert rows.drops(tmp_path / "stores" / "seeds2", "pruning") == rows.drops(runs[2], "pruning")
    assert extract.stat().st_size < 20_000
    accuracy = {
        (r.defense, r.seed): r.metrics["accuracy"]
        for r in ResultStore(runs[2] / "results.sqlite").records()
        if r.kind == "utility"
    }
    assert rows.drops(runs[2], "pruning") == [accuracy["none", s] - accuracy["pruning", s] for s in (0, 1)]
    assert rows.drops(runs[2], "pruning", model="lenet") == rows.drops(runs[2], "pruning")
    with pytest.raises(SystemExit, match="no utility dcs2 cell"):
        rows.accuracies(runs[2], "dcs2")
    with pytest.raises(SystemExit, match="no utility pruning · smlp cell"):
        rows.accuracies(runs[2], "pruning", model="smlp")


def _fake_precode_runs(
    precode_at_50: float = 0.05,
    undefended_at_50: float = 0.99,
    seeds=(0, 1, 2),
    lenet_leak=None,
    ng2_cost=0.0,
):
    """Stored cells of the four PRECODE runs with the paper's own numbers (40 victims within ± 0.004 of
    each value at every seed, the seeds' means and accuracies within ± 0.002 of the paper's), keyed by
    run directory name; ``lenet_leak`` replaces the undefended LeNet's SSIM, ``ng2_cost`` adds to NG-2's
    accuracy cost."""
    from helpers import leaderboard_cell

    rows = _rows_script()
    spread = [-0.004, -0.003, -0.001, 0.0, 0.0, 0.001, 0.003, 0.004] * 5  # 40: 0 of 40 bounds a share < 0.1

    def cells(kind, model=None, defense=None, at=0, value=None, accuracy=None, among=seeds):
        out = []
        for s in among:
            victims = [value + 0.002 * (s - 1) + d for d in spread] if value is not None else None
            attack = "iga-precode" if kind == "attack" else None
            ssim = 0.237 if kind == "baseline" else None  # the no-information level
            acc = accuracy + 0.002 * (s - 1) if accuracy is not None else None
            out.append(leaderboard_cell(kind, defense, attack, round=at, seed=s, model=model, victims=victims,
                                        accuracy=acc, ssim=ssim))  # fmt: skip
        return out

    base = cells("baseline", among=[None])
    cpu, accuracy, training, epoch50 = list(base), [], list(base), list(base)
    for model, (leak, cut, before, after) in rows.PRECODE_TABLE1.items():
        undefended = lenet_leak if lenet_leak is not None and model == "lenet-tanh" else leak
        cpu += cells("attack", model, "none", 0, value=undefended) + cells(
            "attack", model, "PRECODE", 0, value=cut
        )
        defended = {"none": before, "PRECODE": after}
        for label in ("NG-2", "NG-3", "GC", "GC-keep10"):
            ssim, acc = rows.PRECODE_TABLE2.get(model, {}).get(label.removesuffix("-keep10"), (leak, before))
            cpu += cells("attack", model, label, 0, value=ssim)
            defended[label] = acc - (100 * ng2_cost if label == "NG-2" else 0.0)
        for label, acc in defended.items():
            accuracy += cells("utility", model, label, accuracy=acc / 100, among=(0, 1, 2))
        for label, value in (("none", 0.99), ("PRECODE", 0.05)):  # Fig. 8: undefended near 1
            training += [c for at in (0, 1) for c in cells("attack", model, label, at, value=value)]
        dmlp = model == "dmlp"
        epoch50 += cells("attack", model, "none", 50, value=undefended_at_50 if dmlp else 0.99)
        epoch50 += cells("attack", model, "PRECODE", 50, value=precode_at_50 if dmlp else 0.05)
    return {"precode-cpu": cpu, "precode-accuracy": accuracy, "precode-training": training,
            "precode-epoch50": epoch50}  # fmt: skip


def test_the_precode_rows_hold_on_the_papers_numbers_and_fail_where_the_paper_does(monkeypatch):
    """Every PRECODE rule can hold (given the paper's own numbers over three seeds, each row reads
    *holds* and checks back against its own number and rule), a PRECODE that leaks after 50 epochs reads
    *does not hold* on SSIM and on the share of recognizable images, a hold where the undefended model
    leaks nothing is refused, and the same numbers from one seed read *inconclusive* throughout."""
    rows = _rows_script()

    def use(**fake):
        runs = _fake_precode_runs(**fake)
        monkeypatch.setattr(rows, "_records", lambda run: tuple(runs[run.name]))
        return [line for _, lines in rows.precode_rows(Path("runs")) for line in lines]

    lines = use()
    assert len(lines) == 9 + 16 + 12
    parsed = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    assert all(check_row(measured, rule, said) is None for _, _, measured, rule, said in parsed)
    assert [said for *_, said in parsed] == ["holds"] * len(lines), [p[0] for p in parsed if p[4] != "holds"]
    assert all("per seed" in measured for _, _, measured, _, _ in parsed)
    lines = use(precode_at_50=0.8)
    failed = [line for line in lines if line.endswith("| does not hold |")]
    assert len(failed) == 2 and all("DMLP" in line and "after 50 epochs" in line for line in failed)
    assert "stays below 0.15" in failed[0] and "rebuilt recognizably" in failed[1]  # SSIM, then ASR
    with pytest.raises(SystemExit, match="a hold says nothing"):
        use(undefended_at_50=0.3)  # the no-information level is 0.237
    lines = use(undefended_at_50=0.3, precode_at_50=0.8)  # a failure still reads
    assert any("no-information level" in line and line.endswith("| does not hold |") for line in lines)
    # reproduced numbers are two-sided: a LeNet that leaks more than the paper's 0.55, or NG-2 costing 8
    # points more than the paper's drop, is not the paper's finding (a one-sided rule would hold both)
    failed = [line for line in use(lenet_leak=0.95, ng2_cost=0.08) if line.endswith("| does not hold |")]
    assert len(failed) == 3 and "undefended LeNet" in failed[0], failed
    assert all("`NG-2` costs about" in line for line in failed[1:])
    privacy = [line for line in use(seeds=(0,), precode_at_50=0.8) if "precode-accuracy" not in line]
    assert privacy and all(line.endswith("| inconclusive |") for line in privacy)
    assert all("n = 1 (one seed" in line for line in privacy)


def test_a_share_row_gives_the_exact_binomial_interval():
    """0 of 8 bounds a share only below 0.369 (a t-interval would have no width and read *holds*); 6 of
    16 lies in [0.152, 0.646]; the row parses back through check_row."""
    from leakshield.leaderboard.verdicts import share_row

    claim = Claim(0.0, 0.1, 1.0, one_sided=True)
    none_of_8 = share_row("c", "cmd", claim, [False] * 8, "per victim")
    six_of_16 = share_row("c", "cmd", claim, [True] * 6 + [False] * 10, "per victim")
    assert "0.000 [0.000, 0.369], n = 8 (per victim; 0 of 8, exact binomial)" in none_of_8
    assert none_of_8.endswith("| inconclusive |") and six_of_16.endswith("| does not hold |")
    assert "0.375 [0.152, 0.646], n = 16" in six_of_16
    all_of_4 = share_row("c", "cmd", claim, [True] * 4, "per victim")
    assert "1.000 [0.398, 1.000], n = 4" in all_of_4
    for line in (none_of_8, six_of_16, all_of_4):
        _, _, measured, rule, said = (c.strip() for c in line.strip("|").split("|"))
        assert check_row(measured, rule, said) is None


def _clustered(rng, mean: float, seeds: int, victims: int = 8, sd: float = 0.2):
    """Scores of the same ``victims`` on ``seeds`` models: a model's shift shared by its victims (0.3 of
    the variance; the leaderboard's measured within-model ICC is 0.22–0.37), a victim's own difficulty
    shared across the models (0.3), and noise (0.4)."""
    import math

    difficulty = [rng.gauss(0, sd * math.sqrt(0.3)) for _ in range(victims)]
    out = {}
    for s in range(seeds):
        shift = rng.gauss(0, sd * math.sqrt(0.3))
        out[s] = [
            min(1.0, max(-1.0, mean + shift + d + rng.gauss(0, sd * math.sqrt(0.4)))) for d in difficulty
        ]
    return out


def test_a_seed_row_sees_a_cut_and_not_one_whose_victims_fail_together():
    """Planted through the real row: a cut just short of the claim's region (true mean 0.26 against ≤
    0.25), its victims failing together on a model and across models, reads *holds* in at most 2.5 % of
    tables at 3 and 5 seeds (measured 2.25 % and 1.25 %), where an interval over the pooled victims of
    those models does in 15–17 %; a cut well inside (0.05) holds in 75 % of tables at 5 seeds (36 % at
    3)."""
    import random

    from leakshield.leaderboard.verdicts import seed_row

    def rate(mean, seeds, pooled=False, n=400):
        rng, held = random.Random(1), 0
        for _ in range(n):
            table = _clustered(rng, mean, seeds)
            values = [x for v in table.values() for x in v]
            line = row("c", "c", CUT_AT_LEAST, values) if pooled else seed_row("c", "c", CUT_AT_LEAST, table)
            held += line.endswith("| holds |")
        return held / n

    assert rate(0.26, 3) <= 0.025 and rate(0.26, 5) <= 0.025
    assert rate(0.26, 3, pooled=True) >= 0.10  # what the per-victim rows did
    assert rate(0.05, 5) >= 0.7 and rate(0.05, 3) >= 0.3


def test_a_seed_row_states_its_unit_and_never_reads_more_than_its_seeds_allow():
    """One seed: the mean alone, n = 1, inconclusive, whatever its victims say; seeds that agree exactly
    keep the victims' interval (a share of 0 of 8 at each of 3 seeds is bounded by 0 of 8's exact
    interval, 0.369: the victims are the same at every seed); an interval is clipped to the score's
    range; a row refuses seeds of different victims, a share of non-events and scores out of range."""
    from leakshield.leaderboard.verdicts import seed_row

    one = seed_row("c", "`cmd`", CUT_AT_LEAST, {0: [0.10, 0.11, 0.12, 0.10]})
    assert "| 0.108, n = 1 (one seed; 4 victims; the victims' interval [0.092, 0.123]) |" in one
    assert one.endswith("| inconclusive |")
    share = Claim(0.0, 0.1, 1.0, one_sided=True)
    none = seed_row("c", "`cmd`", share, {s: [False] * 8 for s in range(3)}, share=True)
    assert "0.000 [0.000, 0.369], n = 3 (per seed; 8 victims each; 0 of 24 over the seeds)" in none
    assert none.endswith("| inconclusive |")
    hard = seed_row("c", "`cmd`", CUT_AT_LEAST, {s: [0.0, 0.1, 0.0, 0.5] for s in range(3)})  # no seed spread
    assert "0.150 [-0.229, 0.529], n = 3" in hard and hard.endswith("| inconclusive |")
    bimodal = seed_row("c", "`cmd`", CUT, {0: [1.0, 1.0, 0.2], 1: [1.0, 0.99, 1.0], 2: [0.1, 1.0, 1.0]})
    measured = [c.strip() for c in bimodal.strip("|").split("|")][2]
    assert measured.startswith("0.810 [") and ", 1.000], n = 3" in measured  # not past 1
    for line in (one, none, hard, bimodal):
        _, _, measured, rule, said = (c.strip() for c in line.strip("|").split("|"))
        assert check_row(measured, rule, said) is None
    with pytest.raises(ValueError, match="same at every seed"):
        seed_row("c", "`cmd`", CUT, {0: [0.1, 0.2], 1: [0.1]})
    with pytest.raises(ValueError, match="0/1 events"):
        seed_row("c", "`cmd`", share, {0: [0.1, 0.2]}, share=True)
    with pytest.raises(ValueError, match="outside"):
        seed_row("c", "`cmd`", CUT, {0: [19.2, 21.0], 1: [20.1, 18.3]})  # PSNR without its bounds


def test_seeds_to_decide_scales_the_spread_to_the_region():
    """A cost of 4.3 points ± 3.5 over 3 seeds against 'at most 2.6 points': 6 seeds at that spread
    would exclude the region, and more (21) where the mean lies nearer the region's edge."""
    from leakshield.leaderboard.intervals import estimate
    from leakshield.leaderboard.verdicts import seeds_to_decide

    no_cost = Claim(paper=0.006, tolerance=0.02, null=0.05, one_sided=True)
    found = estimate([0.029, 0.043, 0.057])
    needed = seeds_to_decide(no_cost, found)
    assert needed == 6
    assert verdict(no_cost, *_at(found, needed), n=needed) == "does not hold"
    assert verdict(no_cost, *_at(found, needed - 1), n=needed - 1) == "inconclusive"
    nearer = seeds_to_decide(no_cost, estimate([0.019, 0.033, 0.047]))  # the same spread, nearer the edge
    assert nearer == 21
    assert seeds_to_decide(no_cost, estimate([0.03])) is None  # no spread to scale


def _at(found, n):
    import math

    from leakshield.leaderboard.intervals import t_quantile

    sd = found.half_width * math.sqrt(found.n) / t_quantile(found.n - 1)
    half = t_quantile(n - 1) * sd / math.sqrt(n)
    return found.mean - half, found.mean + half


STORES = PAGE.parent / "reproduction-stores"


def _older_verdicts(text: str) -> list[tuple[str, str]]:
    """(claim, verdict) of every table with a verdict column but no rule column (the older format)."""
    return [
        (cells[0], cells[header.index("verdict")])
        for header, cells in _table_rows(text)
        if "verdict" in header and not any(h.startswith("rule") for h in header)
    ]


def test_every_privacy_row_of_the_page_rests_on_seeds_and_is_recomputed_from_its_store():
    """The page's privacy rows: none whose unit is the victim, one seed or one model reads more than
    *inconclusive*, no verdict of an older table (no rule column, so no interval over seeds) reads
    *holds* or *does not hold*, and the rows over seeds are exactly the lines their runs' extracts
    (``docs/reproduction-stores``, written by ``reproduction_rows.py --export``) give back through the
    real row code, verdicts included."""
    from helpers import benchmark_script

    text = PAGE.read_text(encoding="utf-8")
    for claim, measured, _, said in _rule_rows(text):
        if any(unit in measured for unit in ("per victim", "(one seed", "(one model")):
            assert said == "inconclusive", (claim[:70], measured)
    older = [(claim[:60], said) for claim, said in _older_verdicts(text)]
    assert len(older) >= 20 and not [c for c, said in older if said.startswith(("holds", "does not hold"))]
    script, column = _rows_script(), benchmark_script("cifar_column")
    recomputed = script.dcs2_privacy_rows(STORES)
    if (STORES / "precode-cpu.json").is_file():
        tables = script.precode_rows(STORES, costs=False, training=False)
        recomputed += [line for _, lines in tables for line in lines]
    if (STORES / "dcs2-cifar.json").is_file():
        recomputed += column.dcs2_column(STORES)
    over_seeds = [line for line in text.splitlines() if line.startswith("| ") and "(per seed;" in line]
    assert sorted(over_seeds) == sorted(recomputed)
