"""The leaderboard: ranking by strongest attack (ties, failed cells, seeds), the Pareto front, threat
models, presets, the command end to end, and the README's generated Results section."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from leakshield.cli import main
from leakshield.errors import ConfigError
from leakshield.experiment.store import CellRecord
from leakshield.leaderboard.export import (
    readme_block,
    readme_section,
    records_from_json,
    results_page,
    scenarios_from_json,
)
from leakshield.leaderboard.ordering import dominates, mark_pareto, rank
from leakshield.leaderboard.presets import leaderboard_data, load_leaderboard, load_scenarios
from leakshield.leaderboard.ranking import AttackScore, Standing, standings
from leakshield.leaderboard.threats import HONEST, MALICIOUS_CLIENT, MALICIOUS_SERVER, UNKNOWN, threat_of
from leakshield.provenance import source_hash

from helpers import leaderboard_cell

ROOT = Path(__file__).resolve().parents[1]


cell = leaderboard_cell  # kind, defense, attack, *, round, seed, status, scale, **metrics


def fake_store() -> list[CellRecord]:
    return [
        cell("baseline", None, victims=[0.2, 0.2]),
        # none: leaks both victims in both seeds; ig is the strongest on all seeds (no stage 2 ran)
        cell("attack", "none", "ig", victims=[0.88, 0.88], psnr=20, seed=0),
        cell("attack", "none", "ig", victims=[0.92, 0.92], psnr=30, seed=1),
        cell("attack", "none", "dlg", victims=[0.5, 0.5], psnr=15, round=2),
        cell("utility", "none", accuracy=0.9, client_seconds=1.0, chance=0.1),
        # noise: two attacks tie on SSIM (no leak); the higher PSNR wins, the other is listed as tied
        cell("attack", "noise", "ig", victims=[0.4, 0.4], psnr=12),
        cell("attack", "noise", "dlg", victims=[0.4, 0.4], psnr=14),
        cell("utility", "noise", accuracy=0.8, client_seconds=2.0),
        # prune: its strongest attack failed; the remaining one counts, the failure is reported
        cell("attack", "prune", "ig", status="failed"),
        cell("attack", "prune", "dlg", victims=[0.4, 0.4], psnr=13),
        cell("utility", "prune", accuracy=0.8),
        # gan: a GAN attack's class-level SSIM is its score
        cell("attack", "gan", "hitaj", class_ssim=0.3),
        cell("utility", "gan", accuracy=0.7),
        # stuck: the most private, but below chance + ½ (0.9 − chance) = 0.5: it does not train
        cell("attack", "stuck", "ig", victims=[0.1, 0.1]),
        cell("utility", "stuck", accuracy=0.3),
        # broken: every attack cell failed → unranked, last
        cell("attack", "broken", "ig", status="failed"),
        cell("utility", "broken", accuracy=0.95),
    ]


def test_strongest_attack_ties_failures_and_seeds() -> None:
    rows = {r.defense: r for r in standings(fake_store())}
    none = rows["none"]
    assert none.strongest.attack == "ig" and not none.stage_two and none.cells == 2
    assert none.strongest.ssim == pytest.approx(0.90) and none.strongest.seeds == 2  # every seed
    assert none.strongest.leak.leaked == (2, 2) and none.leaks
    assert rows["noise"].strongest.attack == "dlg" and rows["noise"].tied == ("ig@0",)
    assert not rows["noise"].leaks
    assert rows["prune"].strongest.attack == "dlg" and rows["prune"].failed == ("attack:ig@0",)
    assert rows["gan"].strongest.metric == "class_ssim" and rows["gan"].strongest.ssim == 0.3
    assert rows["broken"].strongest is None and rows["broken"].rank is None
    assert rows["noise"].adr == pytest.approx((0.9 - 0.8) / 0.9)
    assert rows["noise"].cost == pytest.approx(2.0) and rows["prune"].cost is None
    assert rows["stuck"].floor == pytest.approx(0.5) and not rows["stuck"].trains and rows["gan"].trains


def test_ranking_orders_by_margin_and_gates_rows_that_do_not_train() -> None:
    """Rows by mean margin (the GAN's class SSIM, which has no reference, is its margin); from one seed
    nothing is shown different, so every compared row shares the letter a."""
    ordered = standings(fake_store())
    assert [r.defense for r in ordered] == ["noise", "prune", "gan", "none", "stuck", "broken"]
    assert [r.rank for r in ordered] == [1, 2, 3, 4, None, None]
    assert [r.letters for r in ordered] == ["a"] * 4 + [""] * 2


def test_pareto_front() -> None:
    front = {r.defense: r.pareto for r in standings(fake_store())}
    # noise and prune: no leak at the best accuracy of those (both on the front); gan is as private
    # and less accurate; none is the most accurate; stuck does not train; broken has no attack score
    assert front == {"gan": False, "noise": True, "prune": True, "none": True, "stuck": False,
                     "broken": False}  # fmt: skip
    extra = cell("attack", "worse", "ig", victims=[0.7, 0.7])  # leaks, and less accurate than none
    rows = {r.defense: r for r in standings([*fake_store(), extra, cell("utility", "worse", accuracy=0.75)])}
    assert not rows["worse"].pareto


def test_ssims_are_compared_at_the_tables_precision() -> None:
    """Two perfect reconstructions (SSIM 0.99996 and 1.0) tie on privacy: the more accurate defense is
    listed first, shares its letter and dominates the other on the front."""
    records = [
        cell("attack", "a", "ig", ssim=0.99996, psnr=60), cell("utility", "a", accuracy=0.90),
        cell("attack", "b", "ig", ssim=1.0, psnr=70), cell("utility", "b", accuracy=0.95),
    ]  # fmt: skip
    rows = standings(records)
    assert [(r.defense, r.rank, r.letters, r.pareto) for r in rows] == [("b", 1, "a", True), ("a", 2, "a", False)]  # noqa: E501


def test_threat_models_are_read_off_the_stored_threat() -> None:
    assert threat_of(cell("attack", "none", "ig", ssim=0.5)) == HONEST
    assert threat_of(cell("attack", "none", "imprint", ssim=0.5)) == MALICIOUS_SERVER
    assert threat_of(cell("attack", "none", "hitaj", class_ssim=0.5)) == MALICIOUS_CLIENT
    # carlini and dcs2-prior keep priors computed from public knowledge only: honest-but-curious
    assert (
        threat_of(cell("attack", "none", "carlini"))
        == threat_of(cell("attack", "none", "dcs2-prior"))
        == HONEST
    )
    # a label that names no attack and carries no stored threat is not guessed
    assert threat_of(cell("attack", "none", "no-such-attack")) == UNKNOWN


def test_a_labelled_imprint_column_is_still_a_malicious_server(tmp_path) -> None:
    """The threat travels with the cell: a config that labels the imprint attack ``rob`` stores its
    registered name and threat, and the leaderboard reads them (it once read the label and called it
    honest-but-curious)."""
    config = {
        "name": "labelled", "seeds": [0], "dataset": {"name": "digits", "channels": 1, "size": 16},
        "models": [{"name": "mlp", "width": 16}], "fl": {"clients": 2},
        "victims": {"count": 1, "batch_size": 1}, "attack": {"rounds": [0]},
        "defenses": ["none"], "attacks": [{"name": "imprint", "label": "rob", "bins": 8}],
        "utility": {"rounds": 1},
    }  # fmt: skip
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["run", str(path), "--out", str(tmp_path / "run"), "--quiet", "--device", "cpu",
                 "--cache-dir", str(tmp_path / "cache")]) == 0  # fmt: skip
    from leakshield.experiment.store import ResultStore

    (record,) = [r for r in ResultStore(tmp_path / "run" / "results.sqlite").records() if r.kind == "attack"]
    assert (record.attack, record.attack_name) == ("rob", "imprint")
    assert record.threat["catalogue"] == "G" and record.threat["adversary"] == "architecture-server"
    assert threat_of(record) == MALICIOUS_SERVER
    (row,) = standings(ResultStore(tmp_path / "run" / "results.sqlite").records())
    assert row.strongest.attack == "rob" and row.strongest.threat == MALICIOUS_SERVER


def test_presets_merge_params_and_rows() -> None:
    text = (ROOT / "configs" / "leaderboard.yaml").read_text()
    quick = leaderboard_data(text, "quick")
    ig = next(a for a in quick["attacks"] if isinstance(a, dict) and a["name"] == "ig")
    assert ig["iterations"] == 100 and quick["utility"]["rounds"] == 10  # quick's own smoke budgets
    standard = leaderboard_data(text, "standard")
    ig = next(a for a in standard["attacks"] if isinstance(a, dict) and a["name"] == "ig")
    assert ig["iterations"] == 200 and standard["utility"]["rounds"] == 20
    full = leaderboard_data(text, "full")
    assert len(full["defenses"]) > len(quick["defenses"])
    cifar = leaderboard_data(text, "quick", data_root="/data/cifar")
    assert cifar["dataset"] == {"name": "cifar10", "channels": 3, "size": 32, "root": "/data/cifar"}
    assert cifar["defenses"] == quick["defenses"] and cifar["attacks"] == quick["attacks"]
    with pytest.raises(ConfigError, match=r"--preset 'huge'; .* defines: full, gpu, quick, standard"):
        leaderboard_data(text, "huge")
    for preset in ("quick", "standard", "full", "gpu"):
        load_leaderboard(preset)  # every component validates against its registry
        load_scenarios(preset)


TINY = {
    "base": {
        "name": "lb-tiny",
        "dataset": {"name": "digits", "channels": 1, "size": 16},
        "models": [{"name": "lenet", "label": "lenet-tanh", "activation": "tanh", "init_range": None}],
        "fl": {"clients": 2, "local": {"algorithm": "fedavg", "local_lr": 0.1, "batch_size": 16}},
        "attack": {"rounds": [0], "update": {"algorithm": "fedsgd"}, "threat": {"labels_known": True}},
        "victims": {"count": 1, "batch_size": 1, "per_seed": True},
        "defenses": ["none", {"name": "pruning", "ratio": 0.9}],
        "attacks": ["ig", "pruning-aware"],
        "utility": {"rounds": 1},
    },
    "presets": {"smoke": {"params": {"ig": {"iterations": 10}, "pruning-aware": {"iterations": 10}},
                          "scenarios": ["batch"], "stage2": {"victims": 3}}},
    "scenarios": {"batch": {"title": "batch 1 and 2", "axes": {"batch_size": [1, 2]},
                            "utility": {"rounds": 0}, "attacks": ["ig"]}},
}  # fmt: skip


def test_leaderboard_command_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config, out, readme = tmp_path / "board.yaml", tmp_path / "run", tmp_path / "README.md"
    config.write_text(yaml.safe_dump(TINY))
    readme.write_text("# project\n")
    args = ["leaderboard", "--config", str(config), "--preset", "smoke", "--out", str(out), "--quiet"]
    assert main([*args, "--device", "cpu", "--readme", str(readme)]) == 0
    html = (out / "leaderboard.html").read_text()
    assert "Rankings, one per threat model" in html and "data:image/png;base64" in html
    assert "Metric conventions" in html and "Realism: batch 1 and 2" in html and "batch=2" in html
    assert {p.name for p in (out / "leaderboard").iterdir()} == {
        "lenet-tanh__none.html",
        "lenet-tanh__pruning.html",
    }
    assert (out / "scenarios" / "batch" / "results.sqlite").is_file()
    block = readme_block(readme.read_text())
    text = (tmp_path / "docs" / "leaderboard" / "smoke.json").read_text()
    # stage 2: each row's chosen cell rerun on 3 fresh victims (per-seed baseline + the attack cell)
    reruns = json.loads(text)["stage2"]
    assert {(r["rerun"]["defense"], r["rerun"]["victims"], r["rerun"]["offset"]) for r in reruns} == {
        ("none", 3, 1), ("pruning", 3, 1)}
    assert all(len(c["victims"]) == 3 and c["stage"] == 2 for r in reruns for c in r["cells"])
    assert "stage 2: 3 victims, 1 seeds" in block
    facts, records = records_from_json(text)
    assert block == readme_section(facts, records, "docs/leaderboard/smoke.json", scenarios_from_json(text))
    assert f"source tree `{source_hash()}`" in block and "Honest-but-curious server" in block
    page = (tmp_path / "docs" / "leaderboard" / "smoke.md").read_text()  # every table, beside the export
    assert page == results_page(facts, records, "docs/leaderboard/smoke.json", scenarios_from_json(text))
    assert "Realism: batch 1 and 2" in page and "Realism" not in block  # the README: ranked tables only
    assert "[results page](docs/leaderboard/smoke.md)" in block
    exported = json.loads(text)
    stamped = [c["environment"]["components"] for c in exported["cells"]]
    assert all(set(s) >= {"core", "dataset"} for s in stamped)  # every cell carries its stamps
    assert {s["defense"] for s in stamped if "defense" in s} <= set(exported["provenance"])
    assert {s["core"] for s in stamped} <= set(exported["provenance"])  # the run's own config stamps alike
    capsys.readouterr()
    check = ["leaderboard", "--check", str(readme), "--config", str(config)]
    assert main(check) == 0  # computed by this code
    assert capsys.readouterr().out.startswith("fresh")
    assert main([*args, "--device", "cpu"]) == 0  # a rerun computes nothing
    printed = capsys.readouterr().out
    assert printed.count("0 computed") == 2 and "stage 2: 0 cells computed" in printed  # grids and reruns
    readme.write_text(readme.read_text().replace(source_hash(), "0" * 16))
    assert main(check) == 1
    assert "differs" in capsys.readouterr().out
    export = tmp_path / "docs" / "leaderboard" / "smoke.json"
    assert (
        main(["leaderboard", "--from-export", str(export), "--readme", str(readme), "--config", str(config)])
        == 0
    )
    assert main(check) == 0 and readme_block(readme.read_text()) == block  # rerendered as it was


def test_leaderboard_dry_run_and_tune_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config, out = tmp_path / "board.yaml", tmp_path / "run"
    config.write_text(yaml.safe_dump(TINY))
    args = ["leaderboard", "--config", str(config), "--preset", "smoke", "--out", str(out), "--quiet"]
    assert main([*args, "--device", "cpu", "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "— main grid" in printed and "— scenario batch" in printed and "leaderboard total:" in printed
    assert not (out / "results.sqlite").exists()
    assert main([*args, "--device", "cpu", "--dry-run", "--workers", "2"]) == 0  # the two parts side by side
    printed = capsys.readouterr().out
    assert (
        printed.index("— main grid") < printed.index("— scenario batch") < printed.index("leaderboard total:")
    )
    assert "attack ig" in printed and "with 2 worker(s)" in printed and not (out / "results.sqlite").exists()
    assert main([*args, "--device", "cpu", "--tune"]) == 0
    printed = capsys.readouterr().out
    assert "training:" in printed and "none: {local_lr:" in printed and "pruning: {local_lr:" in printed
    import json

    record = json.loads((tmp_path / "run-tuning" / "tuning.json").read_text())
    assert set(record["defenses"]["none"]["candidates"]) == {"0.01", "0.03", "0.1"}


def _standing(defense: str, ssim: float | None, accuracy: float | None, model: str = "m") -> Standing:
    score = None if ssim is None else AttackScore("ig", 0, ssim, None, 1)
    return Standing(model, defense, score, (), (score,) if score else (), accuracy=accuracy)


def test_pareto_front_and_ranks_by_hand() -> None:
    """Survivors of mutation testing: the dominance test's missing-value guard and its ≥ on accuracy
    were checked only through whole runs. a dominates b (as private, more accurate), i (as accurate,
    more private) and e; c and d are the same point (both on the front); f and g lack a value."""
    rows = [_standing("a", 0.2, 0.9), _standing("b", 0.2, 0.8), _standing("c", 0.5, 0.95),
            _standing("d", 0.5, 0.95), _standing("e", 0.6, 0.5), _standing("i", 0.3, 0.9),
            _standing("f", None, 0.99), _standing("g", 0.1, None),
            _standing("h", 0.9, 0.1, model="other")]  # fmt: skip
    assert not dominates(rows[2], rows[3]) and not dominates(rows[6], rows[1])
    assert not dominates(rows[7], rows[1]) and not dominates(rows[0], rows[7])
    front = {r.defense: r.pareto for r in mark_pareto(rows)}
    assert front == {"a": True, "b": False, "c": True, "d": True, "e": False, "i": False, "f": False,
                     "g": False, "h": True}  # fmt: skip
    ranked = [(r.model, r.defense, r.rank) for r in rank(mark_pareto(rows))]
    assert ranked == [("m", "g", 1), ("m", "a", 2), ("m", "b", 3), ("m", "i", 4), ("m", "c", 5),
                      ("m", "d", 6), ("m", "e", 7), ("m", "f", None), ("other", "h", 1)]  # fmt: skip


def test_standings_average_seeds_and_tolerate_missing_utility() -> None:
    """Survivors of mutation testing, by hand: utility, ε and cost are seed means; PSNR too; a defense
    with attack cells but no utility cell is ranked without an accuracy (not an error), after the rows
    with one at equal SSIM; failed utility cells and cells without a model or attack are not scores."""
    records = [
        cell("attack", "none", "ig", ssim=0.8, psnr=20, seed=0),
        cell("attack", "none", "ig", ssim=1.0, psnr=30, seed=1),
        cell("attack", "none", "ig", ssim=0.8, psnr=20, seed=2),
        cell("attack", "none", "ig", ssim=0.9, psnr=40, seed=3),
        cell("utility", "none", accuracy=0.8, client_seconds=1.0, seed=0),
        cell("utility", "none", accuracy=1.0, client_seconds=3.0, seed=1),
        cell("attack", "dp", "ig", ssim=0.3, seed=0),
        cell("utility", "dp", accuracy=0.6, epsilon=1.0, seed=0),
        cell("utility", "dp", accuracy=0.4, epsilon=3.0, client_seconds=4.0, seed=1),
        cell("utility", "dp", accuracy=0.0, seed=2, status="failed"),
        cell("attack", "bare", "ig", ssim=0.3, seed=0),  # no utility cell at all
        dataclasses.replace(cell("attack", "dp", "dlg", ssim=0.99, seed=0), attack=None),
        dataclasses.replace(cell("attack", "dp", "dlg", ssim=0.99, seed=1), model=None),
    ]  # fmt: skip
    rows = {r.defense: r for r in standings(records)}
    assert set(rows) == {"none", "dp", "bare"}
    none, dp, bare = rows["none"], rows["dp"], rows["bare"]
    # ig over all 4 seeds (no stage 2); utility stays a mean over its own seeds
    assert none.strongest.ssim == pytest.approx(0.875) and none.strongest.psnr == pytest.approx(27.5)
    assert none.accuracy == pytest.approx(0.9) and dp.accuracy == pytest.approx(0.5)
    assert dp.epsilon == pytest.approx(2.0) and dp.adr == pytest.approx(4 / 9)
    assert dp.cost == pytest.approx(4.0 / 2.0) and dp.failed == ("utility:-@0",)
    assert dp.strongest.attack == "ig" and dp.strongest.ssim == pytest.approx(0.3)
    assert bare.accuracy is None and bare.adr is None and bare.epsilon is None and bare.cost is None
    assert (dp.rank, bare.rank) == (1, 2)  # equal margins: the row with an accuracy first
    assert dp.letters == bare.letters == "a"  # one seed each: nothing shown different
    assert list(rows) == ["dp", "bare", "none"]


def test_the_epsilon_column_says_the_level_of_each_guarantee() -> None:
    """DP-SGD's ε is per record, DP-FedAvg's per client: the table says which, and the row keeps both."""
    from leakshield.leaderboard.tables import ranking_rows

    records = [
        cell("attack", "none", "ig", ssim=0.9, seed=0),
        cell("utility", "none", accuracy=0.9, seed=0),
        cell("attack", "client-dp", "ig", ssim=0.1, seed=0),
        cell("utility", "client-dp", accuracy=0.8, epsilon_client=4.4, seed=0),
        cell("utility", "client-dp", accuracy=0.8, epsilon_client=4.6, seed=1),
        cell("attack", "dp", "ig", ssim=0.1, seed=0),
        cell("utility", "dp", accuracy=0.8, epsilon=1.25, seed=0),
    ]  # fmt: skip
    rows = standings(records)
    header, body = ranking_rows(rows, active=False)
    column = header.index("ε")
    text = {line[1].split(" · ")[1]: line[column] for line in body}
    assert text == {"client-dp": "4.50 per client", "dp": "1.25 per record", "none": "—"}


def test_frontier_labels_of_points_at_one_spot_are_listed_together() -> None:
    """Points this close (quantization and clipping) are one spot on the plot and share one block; dropout
    beside them (0.922 against 1.000) gets its own, placed by :func:`place_labels`."""
    from leakshield.leaderboard.report import frontier_png, label_clusters

    rows = [_standing("quantization", 1.0, 0.972), _standing("dropout", 0.922, 0.968),
            _standing("clipping", 0.995, 0.966), _standing("precode", 0.852, 0.953),
            _standing("dm", 0.429, 0.950), _standing("instahide", 0.674, 0.099)]  # fmt: skip
    groups = [[r.defense for r in group] for group in label_clusters(rows)]
    assert groups == [["quantization", "clipping"], ["dropout"], ["precode"], ["dm"], ["instahide"]]
    assert frontier_png(rows, 0.403)[:4] == b"\x89PNG"


#: the regenerated standard export's honest-server frontier (mean margin, accuracy), where LODA's label was
#: drawn over Anti-GAN's, PRECODE's under a marker and MixUp's block over the right-hand spot's
FRONTIER = [("dp-sgd@noise_multiplier=2", 0.064, 0.659), ("dp-sgd", 0.080, 0.884), ("ats", 0.082, 0.749),
            ("dp-sgd@noise_multiplier=0.1", 0.181, 0.932), ("dm", 0.185, 0.952),
            ("augmentation", 0.194, 0.910), ("loda", 0.283, 0.936), ("antigan", 0.344, 0.957),
            ("precode", 0.502, 0.948), ("gaussian-noise@sigma=0.1", 0.546, 0.937), ("mixup", 0.557, 0.952),
            ("dropout", 0.620, 0.968), ("dcs2", 0.636, 0.933), ("gaussian-noise@sigma=0.01", 0.746, 0.966),
            ("pruning", 0.754, 0.966), ("quantization", 0.755, 0.972), ("clipping", 0.755, 0.970),
            ("soteria", 0.755, 0.968), ("gaussian-noise", 0.755, 0.967), ("none", 0.755, 0.967),
            ("laplacian-noise", 0.755, 0.966), ("censor (does not train)", 0.003, 0.116),
            ("dp-fedavg-local (does not train)", 0.048, 0.114),
            ("gaussian-noise@sigma=1 (does not train)", 0.152, 0.363),
            ("instahide (does not train)", 0.396, 0.099),
            ("dp-fedavg (does not train)", 0.755, 0.147)]  # fmt: skip


def test_frontier_labels_overlap_neither_one_another_nor_the_points() -> None:
    """The blocks the frontier draws (its groups, its axes' size and limits), measured after drawing: as
    many as the groups, none meeting another or a marker, all inside the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.text import Text
    from matplotlib.transforms import Bbox

    from leakshield.leaderboard.labels import _overlap, marker_half, place_labels
    from leakshield.leaderboard.report import label_groups

    rows = [_standing(name, x, y) for name, x, y in FRONTIER]
    groups = label_groups(rows)
    assert max(text.count("\n") for _, text in groups) >= 6  # the right-hand spot: one block of seven names
    fig, ax = plt.subplots(figsize=(7.5, 5), dpi=110)
    points = [(x, y) for _, x, y in FRONTIER]
    ax.scatter(*zip(*points, strict=True), s=36)
    ax.set_xlim(-0.04, 1.005)  # as the plot's: room for the labels right of the points
    place_labels(ax, groups, points)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    drawn = [Text.get_window_extent(t, renderer) for t in ax.texts]
    half = marker_half(fig)
    markers = [Bbox.from_extents(px - half, py - half, px + half, py + half)
               for px, py in (ax.transData.transform(p) for p in points)]  # fmt: skip
    plt.close(fig)
    assert len(drawn) == len(groups)  # every rejected place was taken off the axes
    for k, box in enumerate(drawn):
        assert not [b for b in drawn[k + 1:] if _overlap(box, b)], groups[k][1]  # no two blocks meet
        assert not [m for m in markers if _overlap(box, m)], groups[k][1]  # no block covers a point
        assert _overlap(box, frame) == box.width * box.height  # inside the axes


def test_the_dry_run_adds_the_probed_fits_of_the_grids_that_left_kinds_out(monkeypatch, capsys) -> None:
    """The leaderboard's total: each grid's estimate, plus its probed fits (per worker) where the grid
    estimator left kinds out; a grid left with kinds and no probe counts them as not estimated."""
    from leakshield.leaderboard import dry_run as module

    parts = [module.GridPart("— main grid\n", 600.0, True, 3),
             module.GridPart("— scenario a\n", 60.0, False, 0),
             module.GridPart("— scenario b\n", 30.0, True, 2)]  # fmt: skip
    probes = [{"fit · dm": 120.0, "FL training under dm": 40.0}, {"fit · ignored": 999.0}, {}]
    monkeypatch.setattr(module, "estimate_grids", lambda grids, device, cache, workers: parts)
    monkeypatch.setattr(module, "probe_grids_kept", lambda grids, device, cache: (probes, ""))

    class Config:
        def model_dump(self, mode: str) -> dict:
            return {}

    grids = [(title, Config(), Path(title)) for title in ("main grid", "scenario a", "scenario b")]
    total = module.dry_run(grids, "cpu", None, workers=1)
    assert total == pytest.approx(600 + 60 + 30 + 160)  # scenario a's probe is not wanted
    printed = capsys.readouterr().out
    assert "probed: fit · dm: 2.0 min" in printed and "ignored" not in printed
    assert "leaderboard total: 14.2 min with 1 worker(s) (2 kind(s) not estimated, listed above)" in printed


def test_a_cell_that_failed_on_a_seed_is_chosen_on_the_seeds_it_ran() -> None:
    """ig leaks on seed 0 and failed on seed 1: chosen by its leak rate on the seed it ran (1 of 1), over
    dlg (0 of 2); the failure is listed and the seeds with a leak (1 of 2) say so."""
    records = [
        cell("baseline", None, victims=[0.2]),
        cell("attack", "d", "ig", victims=[0.9], seed=0),
        cell("attack", "d", "ig", seed=1, status="failed"),
        cell("attack", "d", "dlg", victims=[0.3], seed=0),
        cell("attack", "d", "dlg", victims=[0.3], seed=1),
    ]
    (row,) = standings(records)
    assert row.leaks and row.strongest.attack == "ig" and row.strongest.leak.seeds == (0,)
    assert row.failed == ("attack:ig@0",) and row.seeds_leaking == (1, 2) and row.tied == ()
