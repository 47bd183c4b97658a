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
from leakshield.leaderboard.tables import ranked_records, score_text, threat_tables
from leakshield.leaderboard.threats import HONEST, MALICIOUS_SERVER, threat_of
from leakshield.leaderboard.tuning import candidates, selection, training_section, tuning_config
from leakshield.provenance import tree_hash

from helpers import leaderboard_cell

ROOT = Path(__file__).resolve().parents[1]


cell = leaderboard_cell  # kind, defense, attack, *, round, seed, status, scale, **metrics


def test_intervals_are_t_intervals_over_seeds() -> None:
    found = estimate([0.4, 0.45, 0.5])
    # s = 0.05, s/√3 = 0.02887, t(0.975, 2) = 4.3027
    assert found.mean == pytest.approx(0.45) and found.half_width == pytest.approx(0.12422, abs=1e-4)
    assert estimate([0.7]).half_width is None
    assert estimate([0.4, 0.45, 0.5]).overlaps(estimate([0.56, 0.6, 0.64]))
    assert not estimate([0.40, 0.41, 0.42]).overlaps(estimate([0.50, 0.51, 0.52]))


def victims_per_seed(defense, attack, per_seed, **extra):
    """One attack cell per seed, each with its victims' SSIMs."""
    return [cell("attack", defense, attack, seed=i, victims=v, psnr=10 + sum(v), **extra)
            for i, v in enumerate(per_seed)]  # fmt: skip


def test_rows_follow_their_margin_and_differences_without_spread_are_not_over_read() -> None:
    """Baseline 0.30 per victim; 6 seeds, every seed alike. Margins per seed: 'under' 0, 'flat' 0.1
    (0.5 − 0.3 on one victim of two), 'b' 0.25, 'a' 0.3, 'c' 0.625, 'none' 0.7. Each difference from
    no defense is the same in every seed: its p is the exact sign-flip 1/64, above Holm's α/5, so no row
    is shown to leak less — and no pair is separated (two-sided 2/64 over 15 pairs): one letter."""
    half, both = [0.9, 0.3], [0.95, 0.9]
    records = [
        cell("baseline", None, victims=[0.30, 0.30]),
        *victims_per_seed("flat", "ig", [[0.2, 0.5]] * 6),
        *victims_per_seed("under", "ig", [[0.25, 0.25]] * 6),
        *victims_per_seed("a", "ig", [half] * 6), *victims_per_seed("b", "ig", [[0.3, 0.8]] * 6),
        *victims_per_seed("c", "ig", [both] * 6), *victims_per_seed("none", "ig", [[1.0, 1.0]] * 6),
    ]  # fmt: skip
    ordered = [r for r in standings(records)]
    rows = {r.defense: r for r in ordered}
    assert not rows["flat"].leaks and not rows["under"].leaks and rows["a"].leaks
    assert [r.defense for r in ordered] == ["under", "flat", "b", "a", "c", "none"]
    assert [r.rank for r in ordered] == [1, 2, 3, 4, 5, 6] and {r.letters for r in ordered} == {"a"}, [(r.defense, r.letters, r.strongest.margins) for r in ordered]  # noqa: E501
    assert rows["a"].versus_none.mean == pytest.approx(-0.4) and rows["a"].versus_none.p == pytest.approx(1 / 64)  # noqa: E501
    assert not any(r.versus_none.less for r in ordered if r.defense != "none")
    assert rows["a"].strongest.leak.seeds == tuple(range(6))
    assert rows["a"].strongest.leak.rate == pytest.approx(0.5)
    assert score_text(rows["under"].strongest) == "0.250 ± 0.000 ≈ mean image"
    # a victim at SSIM 0.6 but not above its own reference does not leak
    same = [cell("baseline", None, victims=[0.65]), cell("attack", "d", "ig", victims=[0.65])]
    assert not standings(same)[0].leaks


def test_the_dcs2_pattern_is_caught_where_the_t_rule_tied_it_with_no_leakage() -> None:
    """Two seeds of three fully leaked, one at the baseline (DCS² under the malicious server in wave
    3): the seed-mean t-interval (0.818 ± 0.784) reached down to the baseline; the leak count does not."""
    records = [cell("baseline", None, victims=[0.4, 0.4]),
               *victims_per_seed("dcs2", "ig", [[1.0, 1.0], [1.0, 1.0], [0.4, 0.4]])]  # fmt: skip
    (row,) = standings(records)
    assert row.leaks and row.rank == 1
    whole = row.scores[0]
    assert whole.leak.seeds_leaking == 2 and not whole.estimate.above(0.4)  # the old rule's verdict


def test_a_leaking_attack_is_strongest_over_a_higher_one_at_its_own_prior() -> None:
    """GGL's 0.66 and 0.67 are its prior's draws for the labels: no leakage. IG's 0.62 and 0.61 beat
    the mean image (0.30): IG is the strongest attack, not GGL."""

    def ggl(priors):
        out = victims_per_seed("d", "ggl", [[0.66, 0.67]] * 2, prior_ssim=0.665 if priors else None)
        if priors:
            out = [replace(c, victims=[{"ssim": [0.66], "prior_ssim": [0.66]},
                                       {"ssim": [0.67], "prior_ssim": [0.67]}]) for c in out]  # fmt: skip
        return out

    ig = victims_per_seed("d", "ig", [[0.62, 0.61]] * 2)
    (row,) = standings([cell("baseline", None, victims=[0.30, 0.30]), *ig, *ggl(True)])
    assert row.leaks and row.strongest.attack == "ig"
    found = next(s for s in row.scores if s.attack == "ggl")
    assert found.reference == pytest.approx(0.665) and found.reference_kind == "prior draw"
    assert not found.measurable
    # without the prior's draw, GGL's victims leak above the mean image with the higher SSIM
    assert (
        standings([cell("baseline", None, victims=[0.30, 0.30]), *ig, *ggl(False)])[0].strongest.attack
        == "ggl"
    )


def test_the_utility_gate_judges_each_model_against_its_own_undefended_accuracy() -> None:
    """Floor = chance + ½ (undefended − chance): 0.1 + 0.45 · … per model. 'dp' at 0.40 trains on the
    resnet (undefended 0.45: floor 0.275) and not on the mlp (0.97: floor 0.535)."""
    records = [cell("baseline", None, victims=[0.3])]
    for model, clean in (("resnet", 0.45), ("mlp", 0.97)):
        for defense, accuracy, value in (("none", clean, 1.0), ("dp", 0.40, 0.2)):
            attack = cell("attack", defense, "ig", victims=[value])
            utility = cell("utility", defense, accuracy=accuracy, chance=0.1)
            records += [replace(attack, model=model), replace(utility, model=model)]
    rows = {(r.model, r.defense): r for r in standings(records)}
    assert rows[("resnet", "dp")].floor == pytest.approx(0.275) and rows[("resnet", "dp")].rank == 1
    assert rows[("mlp", "dp")].floor == pytest.approx(0.535) and rows[("mlp", "dp")].rank is None
    assert not rows[("mlp", "dp")].pareto and rows[("mlp", "none")].rank == 1


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
    assert [row[9] for row in tables[1].rows] == ["50% · 0.900", "—"]
    _, exported = records_from_json(export_json(records, {"name": "x"}))  # the export keeps what it needs
    assert [row[9] for row in threat_tables(exported)[1].rows] == ["50% · 0.900", "—"]


def test_the_standard_preset_is_fair_and_realistic() -> None:
    """8 attack seeds (3 for utility); utility after ≥ 20 rounds; every victim a sensitive sample with
    DCS² protecting the same 10 %; PRECODE and Anti-GAN train with Adam (their papers), the rest with
    SGD; the scenarios cover secure aggregation, batch 1/16/64, FedAvg local steps, three model states
    and ResNet-18 at 32 px in eval- and train-mode BatchNorm."""
    config = load_leaderboard("standard")
    assert len(config.seeds) >= 8 and len(config.utility_seeds) == 3 and config.utility.rounds >= 20
    assert config.victims.sensitive == 1 and config.metrics.sensitive.fraction == 0.1
    dcs2 = next(d for d in config.defenses if d.name == "dcs2")
    assert dcs2.entries[0]["params"]["fraction"] == 0.1
    optimizers = {d.display: config.fl_for(d).local.optimizer for d in config.defenses}
    assert optimizers["precode"] == optimizers["antigan"] == "adam" and optimizers["none"] == "sgd"
    scenarios = {name: (c, about) for name, c, about in load_scenarios("standard")}
    secagg, about = scenarios["secure-aggregation"]
    assert secagg.fl.secure_aggregation and secagg.axes.clients == [1, 4] and about["ranked"]
    # every ranked table attacks every model state of the main grid; the trained round is ranked too
    assert set(config.attack.rounds) <= set(secagg.attack.rounds) and scenarios["model-state"][1]["ranked"]
    assert scenarios["batch"][0].axes.batch_size == [1, 16, 64]
    assert scenarios["local-steps"][0].attack.update.algorithm == "fedavg"
    assert scenarios["local-steps"][0].attack.update.local_epochs > 1
    assert scenarios["model-state"][0].attack.rounds == [0, 2, 20]
    eval_, train = scenarios["resnet18-eval"][0], scenarios["resnet18-train"][0]
    assert eval_.models[0].name == train.models[0].name == "resnet18" and eval_.dataset.params["size"] == 32
    assert (eval_.attack.model_mode, train.attack.model_mode) == ("eval", "train")
    exact = scenarios["exact-mlp"][0]  # the exact attacks meet the model they apply to
    assert exact.models[0].name == "smlp" and [a.name for a in exact.attacks] == ["spear", "analytic"]
    assert "exact-vit" not in scenarios and not scenarios["exact-mlp"][1].get("ranked")
    vit = {name: c for name, c, _ in load_scenarios("full")}["exact-vit"]
    assert vit.models[0].name == "vit" and {a.name for a in vit.attacks} == {"april", "ig"}
    # a ranked scenario keeps the preset's seeds; a descriptive one runs 3; both keep the attack budgets
    assert secagg.seeds == scenarios["model-state"][0].seeds == config.seeds
    assert scenarios["batch"][0].seeds == [0, 1, 2]
    assert next(a for a in scenarios["batch"][0].attacks if a.name == "ig").params["iterations"] == 200
    # the screening presets leave out the generic attacks IG dominates (full runs them); every adaptive
    # attack, GGL, the imprint and the participant's GAN attack stay
    screened = {a.name for a in config.attacks}
    assert {"ig", "ggl", "imprint", "hitaj", "carlini", "noise-aware", "ggl-adaptive"} <= screened
    assert not {"dlg", "cpl", "gradinversion"} & screened
    assert {"dlg", "cpl", "gradinversion"} <= {a.name for a in load_leaderboard("full").attacks}
    assert screened == {a.name for a in load_leaderboard("quick").attacks}


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
    assert data["name"] == "leaderboard-standard-model-state" and about["ranked"] is True
    assert data["seeds"] == list(range(8)) and data["utility"]["rounds"] == 0


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


def test_utility_runs_on_its_own_seeds_and_they_must_be_the_experiments() -> None:
    from leakshield.errors import ConfigError
    from leakshield.experiment.cells import expand_grid
    from leakshield.experiment.config import parse_config

    config = load_leaderboard("standard")
    cells = expand_grid(config)
    utility = {c.seed for c in cells if c.kind == "utility"}
    attacked = {c.seed for c in cells if c.kind == "attack"}
    assert utility == {0, 1, 2} and attacked == set(range(8))
    data = config.model_dump(mode="json")
    data["utility"]["seeds"] = [0, 9]
    with pytest.raises((ConfigError, ValueError), match=r"utility.seeds: \[9\] are not in seeds"):
        parse_config(data, source="test")


def test_a_ranked_scenario_cell_that_repeats_a_main_grid_cell_counts_once() -> None:
    """The model-state scenario reruns rounds 0 and 2 of the main grid: those cells are dropped from the
    ranking (counted twice, a seed would weigh double); its round 20 joins."""
    main = [cell("baseline", None, victims=[0.3]), cell("attack", "d", "ig", victims=[0.9]),
            cell("utility", "d", accuracy=0.9)]  # fmt: skip
    scenario = [cell("attack", "d", "ig", victims=[0.9]), cell("attack", "d", "ig", round=20, victims=[0.2])]
    (table,) = threat_tables(main, scenario)
    (row,) = table.rows
    assert row[2].startswith("ig@0 · best of 2") and row[5] == "1/1 = 1.00 [0.03, 1.00]"
    # the report's frontier and defense pages read the same cells: a leak at round 20 alone flags the row
    late = [cell("attack", "d", "ig", round=20, victims=[0.9])]
    quiet = [*main[:1], cell("attack", "d", "ig", victims=[0.2]), main[2]]
    assert not standings(quiet)[0].leaks and standings(ranked_records(quiet, late))[0].leaks


def test_the_full_presets_batch_scenario_draws_its_victims_on_digits():
    """Its 64-image batches once asked 4 × 64 = 256 of a client's 203 digits, and the full preset's dry
    run stopped there with one line; two batches of each size fit."""
    import torch

    from leakshield.experiment.axes import Scale
    from leakshield.experiment.world import ExperimentContext
    from leakshield.leaderboard.presets import load_scenarios

    (batch,) = [config for name, config, _ in load_scenarios("full") if name == "batch"]
    context = ExperimentContext(batch, torch.device("cpu"))
    assert [len(v) for v in context.victims] == [1, 1]
    assert [len(v) for v in context.victims_of(Scale(batch=64))] == [64, 64]
