"""The leaderboard's fair protocol: rankings per threat model, seed intervals and interval ties, the
no-information levels (mean image; a prior's own draw), the standard preset's scenarios and per-defense
training, the learning-rate sweep's selection, and the provenance of published results."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from leakshield.attacks import ATTACKS
from leakshield.leaderboard.export import export_json, records_from_json
from leakshield.leaderboard.intervals import estimate
from leakshield.leaderboard.presets import leaderboard_data, load_leaderboard, load_scenarios, scenario_data
from leakshield.leaderboard.ranking import standings, threats
from leakshield.leaderboard.tables import score_text, threat_tables
from leakshield.leaderboard.threats import HONEST, MALICIOUS_SERVER, threat_of
from leakshield.leaderboard.tuning import candidates, selection, training_section, tuning_config
from leakshield.provenance import tree_hash

from helpers import leaderboard_cell

ROOT = Path(__file__).resolve().parents[1]


cell = leaderboard_cell  # kind, defense, attack, *, round, seed, status, scale, **metrics


def seeds(defense, attack, values, **extra):
    return [cell("attack", defense, attack, seed=i, ssim=v, psnr=10 + v, **extra)
            for i, v in enumerate(values)]  # fmt: skip


def test_intervals_are_t_intervals_over_seeds() -> None:
    found = estimate([0.4, 0.45, 0.5])
    # s = 0.05, s/√3 = 0.02887, t(0.975, 2) = 4.3027
    assert found.mean == pytest.approx(0.45) and found.half_width == pytest.approx(0.12422, abs=1e-4)
    assert estimate([0.7]).half_width is None
    assert estimate([0.4, 0.45, 0.5]).overlaps(estimate([0.56, 0.6, 0.64]))
    assert not estimate([0.40, 0.41, 0.42]).overlaps(estimate([0.50, 0.51, 0.52]))


def test_no_measurable_leakage_ties_at_the_top_and_overlapping_intervals_tie() -> None:
    """Baseline 0.30. 'flat' (0.31 ± wide) and 'under' (0.25) do not measurably beat it: both tie at
    rank 1 whatever their SSIM order. 'a' (0.60 ± 0.01) and 'b' (0.62 ± 0.01) overlap: they share rank
    3; 'c' (0.90, tight) is apart; 'none' leaks fully."""
    records = [
        cell("baseline", None, ssim=0.30),
        *seeds("flat", "ig", [0.20, 0.31, 0.42]), *seeds("under", "ig", [0.25, 0.25, 0.25]),
        *seeds("a", "ig", [0.595, 0.60, 0.605]), *seeds("b", "ig", [0.615, 0.62, 0.625]),
        *seeds("c", "ig", [0.899, 0.90, 0.901]), *seeds("none", "ig", [0.99, 1.0, 1.0]),
    ]  # fmt: skip
    rows = {r.defense: r for r in standings(records)}
    assert not rows["flat"].leaks and not rows["under"].leaks and rows["a"].leaks
    assert [rows[d].rank for d in ("flat", "under", "a", "b", "c", "none")] == [1, 1, 3, 3, 5, 6]
    # s = 0.005 over 3 seeds: t(0.975, 2) · s / √3
    assert rows["a"].strongest.half_width == pytest.approx(4.3027 * 0.005 / 3**0.5, abs=1e-5)
    # a seed above the baseline is shown where the interval cannot tell: 'flat' has one at 0.42
    assert score_text(rows["flat"].strongest).endswith("≈ mean image; worst seed 0.420")
    assert score_text(rows["under"].strongest) == "0.250 ± 0.000 ≈ mean image"
    assert "worst" not in score_text(rows["a"].strongest)


def test_a_measurable_attack_is_strongest_over_a_higher_one_at_its_own_baseline() -> None:
    """GGL's 0.46 is its prior's draw for the label (0.45 ± 0): no leakage. IG's 0.40 beats the mean
    image (0.30): IG is the strongest attack, not GGL."""
    records = [cell("baseline", None, ssim=0.30), *seeds("d", "ig", [0.39, 0.40, 0.41]),
               *seeds("d", "ggl", [0.45, 0.46, 0.47], prior_ssim=0.45)]  # fmt: skip
    (row,) = standings(records)
    assert row.leaks and row.strongest.attack == "ig"
    ggl = next(s for s in row.scores if s.attack == "ggl")
    assert ggl.reference == pytest.approx(0.45) and ggl.reference_kind == "prior draw"
    assert not ggl.measurable
    # without the prior's draw, GGL's 0.46 would be a leak above the mean image, and the strongest
    plain = [cell("baseline", None, ssim=0.30), *seeds("d", "ig", [0.39, 0.40, 0.41]),
             *seeds("d", "ggl", [0.45, 0.46, 0.47])]  # fmt: skip
    assert standings(plain)[0].strongest.attack == "ggl"


def imprint(defense, value, victims=(), **metrics):
    record = cell("attack", defense, "imprint", ssim=value, psnr=40, **metrics)
    return replace(record, threat=ATTACKS.get("imprint").threat.as_json(), victims=list(victims))


def test_each_threat_model_has_its_own_ranking() -> None:
    """A malicious server's imprint attack (SSIM 1 on every defense that leaves images intact) ranks
    nothing under the honest-but-curious server, where pruning protects and noise does not."""
    records = [
        cell("baseline", None, ssim=0.1),
        cell("attack", "noise", "ig", ssim=0.8), cell("attack", "pruning", "ig", ssim=0.3),
        imprint("noise", 1.0),
        imprint("pruning", 0.6, refused=0.5,
                victims=[{"ssim": [0.9]}, {"ssim": [0.3], "refused": "row-guard: duplicated rows"}]),
        cell("utility", "noise", round=20, accuracy=0.9), cell("utility", "pruning", round=20, accuracy=0.8),
    ]  # fmt: skip
    assert threats(records) == [HONEST, MALICIOUS_SERVER]
    honest = {r.defense: r for r in standings(records, HONEST)}
    assert honest["pruning"].rank == 1 and honest["noise"].rank == 2
    assert {s.attack for r in honest.values() for s in r.scores} == {"ig"}
    server = {r.defense: r for r in standings(records, MALICIOUS_SERVER)}
    assert server["pruning"].strongest.attack == "imprint" and server["pruning"].strongest.refused == 0.5
    tables = threat_tables(records)
    assert [t.title for t in tables] == ["Honest-but-curious server (catalogue C)",
                                         "Malicious server (catalogue G)"]  # fmt: skip
    assert any("caught by guard" in h for h in tables[1].header)
    assert not any("caught by guard" in h for h in tables[0].header)
    # half the victims caught; the missed one leaks at 0.9 (the refused one's 0.3 is the mean-image guess)
    assert server["pruning"].strongest.undetected == pytest.approx(0.9)
    assert server["noise"].strongest.refused is None and server["noise"].strongest.undetected is None
    assert [row[5] for row in tables[1].rows] == ["50% · 0.900", "—"]
    _, exported = records_from_json(export_json(records, {"name": "x"}))  # the export keeps what it needs
    assert [row[5] for row in threat_tables(exported)[1].rows] == ["50% · 0.900", "—"]


def test_the_standard_preset_is_fair_and_realistic() -> None:
    """3 seeds; utility after ≥ 20 rounds; every victim a sensitive sample with DCS² protecting the same
    10 %; PRECODE and Anti-GAN train with Adam (their papers), the rest with SGD; the scenarios cover
    secure aggregation, batch 1/16/64, FedAvg local steps, three model states and ResNet-18 at 32 px in
    eval- and train-mode BatchNorm."""
    config = load_leaderboard("standard")
    assert len(config.seeds) >= 3 and config.utility.rounds >= 20
    assert config.victims.sensitive == 1 and config.metrics.sensitive.fraction == 0.1
    dcs2 = next(d for d in config.defenses if d.name == "dcs2")
    assert dcs2.entries[0]["params"]["fraction"] == 0.1
    optimizers = {d.display: config.fl_for(d).local.optimizer for d in config.defenses}
    assert optimizers["precode"] == optimizers["antigan"] == "adam" and optimizers["none"] == "sgd"
    scenarios = {name: (c, about) for name, c, about in load_scenarios("standard")}
    secagg, about = scenarios["secure-aggregation"]
    assert secagg.fl.secure_aggregation and secagg.axes.clients == [1, 4] and about["ranked"]
    assert scenarios["batch"][0].axes.batch_size == [1, 16, 64]
    assert scenarios["local-steps"][0].attack.update.algorithm == "fedavg"
    assert scenarios["local-steps"][0].attack.update.local_epochs > 1
    assert scenarios["model-state"][0].attack.rounds == [0, 2, 20]
    eval_, train = scenarios["resnet18-eval"][0], scenarios["resnet18-train"][0]
    assert eval_.models[0].name == train.models[0].name == "resnet18" and eval_.dataset.params["size"] == 32
    assert (eval_.attack.model_mode, train.attack.model_mode) == ("eval", "train")
    # a scenario keeps the preset's seeds and attack budgets
    assert scenarios["batch"][0].seeds == config.seeds
    assert next(a for a in scenarios["batch"][0].attacks if a.name == "ig").params["iterations"] == 200


def test_a_defense_trains_with_its_own_training() -> None:
    config = load_leaderboard("standard")
    precode = next(d for d in config.defenses if d.name == "precode")
    assert config.fl_for(precode).local.local_lr == precode.training.local_lr
    assert config.fl_for(precode).clients == config.fl.clients  # only the client training changes
    text = (ROOT / "configs" / "leaderboard.yaml").read_text()
    own = text.replace("    - precode\n", "    - {name: precode, training: {local_lr: 0.5}}\n")
    entries = leaderboard_data(own, "quick")["defenses"]
    entry = next(d for d in entries if isinstance(d, dict) and d["name"] == "precode")
    assert entry["training"] == {"local_lr": 0.5}  # an entry's own training wins over the file's section


def test_the_sweep_selects_on_the_public_split_never_on_test() -> None:
    config = load_leaderboard("quick")
    sweep = tuning_config(config)
    assert all(a.against == [] for a in sweep.attacks) and sweep.seeds == config.seeds[:1]
    labels = [d.display for d in sweep.defenses]
    assert "precode@lr=0.001" in labels and "none@lr=0.03" in labels
    assert len(labels) == 3 * len(config.defenses)
    assert {d.training.optimizer for d in sweep.defenses if d.name == "antigan"} == {"adam"}
    records = [
        cell("utility", "none@lr=0.01", round=20, accuracy=0.99, accuracy_public=0.80),
        cell("utility", "none@lr=0.1", round=20, accuracy=0.50, accuracy_public=0.90),
        cell("utility", "precode@lr=0.001", round=20, accuracy=0.7, accuracy_public=0.85),
        cell("utility", "precode@lr=0.003", round=20, accuracy=0.7, accuracy_public=0.85),
    ]  # fmt: skip
    chosen = selection(records)
    assert chosen["none"]["chosen"] == 0.1  # the public split's best, though test would pick 0.01
    assert chosen["precode"]["chosen"] == 0.003  # a tie goes to the larger rate
    section = training_section(sweep, chosen)
    assert section["none"] == {"optimizer": "sgd", "local_lr": 0.1, "momentum": 0.9}
    assert section["precode"] == {"optimizer": "adam", "local_lr": 0.003, "momentum": 0.0}
    assert [c["local_lr"] for c in candidates("antigan", {"local_lr": 0.1})] == [3e-4, 1e-3, 3e-3]


def test_the_shipped_training_section_is_the_recorded_sweeps_choice() -> None:
    import json

    record = json.loads((ROOT / "docs" / "leaderboard" / "tuning.json").read_text())
    config = load_leaderboard("standard")
    for defense in config.defenses:
        chosen = record["training"][defense.name]
        assert defense.training.model_dump(include={"optimizer", "local_lr", "momentum"}) == chosen


def test_the_source_hash_covers_computing_files_only(tmp_path: Path) -> None:
    package = tmp_path / "leakshield"
    for name in ("attacks/ig.py", "cli.py", "report/html.py", "leaderboard/ranking.py", "configs/a.yaml"):
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text("x = 1\n")
    before = tree_hash(package)
    (package / "report" / "html.py").write_text("x = 2\n")
    (package / "cli.py").write_text("x = 2\n")
    assert tree_hash(package) == before  # rendering and argument parsing cannot change a number
    (package / "attacks" / "ig.py").write_text("x = -1\n")
    assert tree_hash(package) != before
    changed = tree_hash(package)
    (package / "configs" / "a.yaml").write_text("lr: 2\n")
    assert tree_hash(package) != changed  # the shipped protocol is part of the results


def test_scenarios_keep_the_presets_params() -> None:
    text = (ROOT / "configs" / "leaderboard.yaml").read_text()
    data, about = scenario_data(text, "standard", "model-state")
    assert data["name"] == "leaderboard-standard-model-state" and about["ranked"] is False
    assert data["seeds"] == [0, 1, 2] and data["utility"]["rounds"] == 0


def test_the_fit_probe_scales_budgets_together_and_extrapolates_to_the_full_one() -> None:
    from leakshield.leaderboard.fit_probe import _at_full, _scaled

    params, factor = _scaled(
        {"cgan_steps": 150, "finetune_steps": 50, "mix": 0.5}, ("cgan_steps", "finetune_steps"), 3
    )
    assert params == {"cgan_steps": 3, "finetune_steps": 1, "mix": 0.5} and factor == pytest.approx(0.02)
    assert _scaled({"iterations": 2}, ("iterations",), 3) == ({"iterations": 2}, 1.0)
    # 1 s at 2 % of the budget, 1.5 s at 4 %: 0.5 s of set-up, 25 s per whole budget → 25.5 s
    assert _at_full([1.0, 1.5], [0.02, 0.04]) == pytest.approx(1.0 + 0.5 / 0.02 * 0.98)
    assert _at_full([1.0, 1.2], [1.0, 1.0]) == 1.2  # already at its budget: the probe was the fit


def test_the_fit_probe_covers_what_the_grid_estimator_leaves_out(tmp_path) -> None:
    """Through the dry run's probing half (a grid as the worker process receives it: JSON)."""
    import json

    from leakshield.experiment.config import parse_config
    from leakshield.leaderboard.dry_run import probe_grids

    from helpers import tiny_config

    config = parse_config(tiny_config(
        defenses=["none", {"name": "dm", "ipc": 1, "iterations": 12}],
        attacks=[{"name": "ig", "iterations": 2},
                 {"name": "ggl", "iterations": 2, "generator_steps": 12, "generator_width": 8}],
        victims={"count": 1, "batch_size": 1, "seed": 0}, utility={"rounds": 1}, seeds=[0, 1],
    ))  # fmt: skip
    grid = ("main grid", json.dumps(config.model_dump(mode="json")), str(tmp_path))
    (found,) = probe_grids([grid], "cpu", None)
    assert set(found) == {"fit · dm", "FL training under dm", "fit · ggl", "attack ggl (4 cells)"}
    assert all(seconds > 0 for seconds in found.values())


def test_an_aggregate_of_one_client_is_a_single_update() -> None:
    aggregated = {"adversary": "observing-server", "knowledge": ["labels"], "aggregated": True}
    one = replace(cell("attack", "none", "ig", ssim=0.9, aggregate_clients=1.0), threat=aggregated)
    four = replace(cell("attack", "none", "ig", ssim=0.9, aggregate_clients=4.0), threat=aggregated)
    assert threat_of(one) == HONEST and threat_of(four) == f"{HONEST} under secure aggregation"
