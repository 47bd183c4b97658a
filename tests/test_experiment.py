"""Config validation, grid expansion, the runner's store, resumption after SIGKILL, and reports."""

import json
import os
import signal
import sqlite3
import subprocess
import sys

import pytest
import torch

from leakshield.errors import ConfigError, RunDirectoryError
from leakshield.experiment import ExperimentRunner, ResultStore, expand_grid, load_config, parse_config
from leakshield.experiment.store import reproducible
from leakshield.report import build_report
from leakshield.threats import OBSERVER

from helpers import CONFIGS, tiny_config, write_config


def test_grid_expands_models_defenses_attacks_rounds_seeds():
    cfg = parse_config(
        tiny_config(seeds=[0, 1], attacks=["ig", {"name": "idlg", "label": "i"}], attack={"rounds": [0, 2]})
    )
    cells = expand_grid(cfg)
    kinds = [c.kind for c in cells]
    assert kinds.count("baseline") == 1 and kinds.count("utility") == 2 and kinds.count("attack") == 8
    assert len({c.key for c in cells}) == len(cells)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"models": ["lenett"]}, r"models\[0\]: unknown model 'lenett' \(did you mean 'lenet'\?\)"),
        ({"attacks": [{"name": "ig", "iterations": 0}]}, r"attacks\[0\]: ig: iterations: .*greater than"),
        ({"victims": {"count": "many"}}, r"victims.count: Input should be a valid integer"),
        ({"fl": {"local": {"local_lr": -0.1}}}, r"fl.local.local_lr: Input should be greater than 0"),
        ({"defenses": ["nope"]}, r"defenses\[0\]: unknown defense 'nope'"),
        ({"colour": "red"}, r"colour: unknown field"),
        ({"attacks": ["ig", "ig"]}, r"attacks: duplicate labels \['ig'\]"),
        (
            {"dataset": {"name": "digits", "channels": 2}},
            r"dataset: digits: channels: Input should be 1 or 3",
        ),
    ],
)
def test_config_errors_name_the_field(change, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(tiny_config(**change))


def test_fingerprint_ignores_report_layout_and_data_location():
    a = parse_config(tiny_config())
    b = parse_config(
        tiny_config(
            report={"rows": ["attack"], "columns": ["model"]},
            dataset={**tiny_config()["dataset"], "root": "/elsewhere"},
        )
    )
    c = parse_config(tiny_config(seeds=[1]))
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()
    # a field added later counts only off its default, so earlier run directories still match
    fl = tiny_config()["fl"]
    assert parse_config(tiny_config(fl={**fl, "aggregator": "mean"})).fingerprint() == a.fingerprint()
    assert parse_config(tiny_config(fl={**fl, "aggregator": "median"})).fingerprint() != a.fingerprint()


def test_run_stores_every_cell_once_and_rerun_does_nothing(tmp_path):
    cfg = parse_config(tiny_config())
    out = tmp_path / "run"
    first = ExperimentRunner(cfg, out, device="cpu", progress=False).run()
    assert (first.total, first.computed, first.failed) == (3, 3, 0)
    records = ResultStore(out / "results.sqlite").records()
    assert sorted(r.kind for r in records) == ["attack", "baseline", "utility"]
    attack = next(r for r in records if r.kind == "attack")
    assert attack.metrics["images"] == 2 and len(attack.victims) == 2
    assert 0 <= attack.metrics["ssim"] <= 1 and (out / attack.images).is_file()
    baseline = next(r for r in records if r.kind == "baseline")
    assert 8 < baseline.metrics["psnr"] < 16  # the mean public image already scores ~10-13 dB
    second = ExperimentRunner(cfg, out, device="cpu", progress=False).run()
    assert (second.computed, second.skipped) == (0, 3)
    assert [r.finished for r in ResultStore(out / "results.sqlite").records()] == [
        r.finished for r in records
    ]


def test_results_are_reproducible(tmp_path):
    cfg = parse_config(tiny_config())
    metrics = []
    for name in ("a", "b"):
        ExperimentRunner(cfg, tmp_path / name, device="cpu", progress=False).run()
        records = ResultStore(tmp_path / name / "results.sqlite").records()
        metrics.append({r.key: reproducible(r.metrics) for r in records})
    assert metrics[0] == metrics[1]


def test_a_different_config_is_refused_and_nothing_is_overwritten(tmp_path):
    out = tmp_path / "run"
    ExperimentRunner(parse_config(tiny_config()), out, device="cpu", progress=False).run()
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    with pytest.raises(RunDirectoryError, match="different config"):
        ExperimentRunner(parse_config(tiny_config(seeds=[7])), out, device="cpu", progress=False).run()
    assert before == {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(RunDirectoryError, match="not a leakshield run"):
        ExperimentRunner(parse_config(tiny_config()), tmp_path / "other", device="cpu", progress=False).run()


def test_missing_data_fails_before_anything_is_written(tmp_path):
    cfg = parse_config(tiny_config(dataset={"name": "cifar10", "root": str(tmp_path / "none")}))
    from leakshield.errors import DataFileMissingError

    with pytest.raises(DataFileMissingError):
        ExperimentRunner(cfg, tmp_path / "run", device="cpu", progress=False).run()
    assert not (tmp_path / "run").exists()


def test_a_failing_cell_is_recorded_and_the_grid_continues(tmp_path):
    attacks = [
        {"name": "ig", "label": "broken", "iterations": 2, "labels": "known"},
        {"name": "ig", "iterations": 2},
    ]
    cfg = parse_config(tiny_config(attacks=attacks))  # labels are not granted: 'known' must fail
    summary = ExperimentRunner(cfg, tmp_path / "run", device="cpu", progress=False).run()
    assert summary.failed == 1 and summary.computed == 4
    records = {r.attack: r for r in ResultStore(tmp_path / "run" / "results.sqlite").records()}
    assert records["broken"].status == "failed" and "does not grant" in records["broken"].error
    assert records["ig"].status == "ok"
    again = ExperimentRunner(cfg, tmp_path / "run", device="cpu", progress=False).run(retry_failed=True)
    assert again.computed == 1 and again.failed == 1


def test_report_files_and_baseline_row(tmp_path):
    cfg = parse_config(
        tiny_config(
            defenses=["none"],
            report={"rows": ["metric"], "columns": ["defense"], "values": ["psnr", "ssim", "accuracy"]},
        )
    )
    out = tmp_path / "run"
    ExperimentRunner(cfg, out, device="cpu", progress=False).run()
    files = build_report(out)
    table = files.markdown.read_text()
    assert "| metric | none | no-information baseline |" in table
    results = table.split("\n## ")[0]  # the results table; the threat section follows
    assert "| psnr | " in results and "| accuracy | " in results and results.count("\n| ") == 4
    assert "## Threat models: to whom each attack leaks" in table
    html = files.html.read_text()
    assert html.count("data:image/png;base64") >= 3  # grid(s), baseline grid, scatter plot
    assert "LPIPS: n/a" in html
    csv_lines = files.csv.read_text().splitlines()
    assert csv_lines[0].startswith("kind,model,defense,attack,round,seed,status") and len(csv_lines) == 4


#: runs the CLI in a child process that kills itself with SIGKILL right after the result store has
#: committed its Nth cell: an event of the run, not a moment in time
KILL_AFTER_NTH_STORED_CELL = """
import os, signal, sys
from leakshield.cli import main
from leakshield.experiment.store import ResultStore

stored, put = 0, ResultStore.put

def put_then_maybe_die(self, record):
    global stored
    put(self, record)
    stored += 1
    if stored == int(os.environ["KILL_AFTER"]):
        os.kill(os.getpid(), signal.SIGKILL)

ResultStore.put = put_then_maybe_die
sys.exit(main(sys.argv[1:]))
"""


def test_sigkill_midway_then_rerun_computes_each_cell_exactly_once(tmp_path):
    cfg = tiny_config(seeds=[0, 1, 2, 3], attacks=[{"name": "ig", "iterations": 20}])
    path = write_config(tmp_path / "cfg.yaml", cfg)
    out = tmp_path / "run"
    args = [
        "run",
        str(path),
        "--out",
        str(out),
        "--quiet",
        "--device",
        "cpu",
        "--threads",
        "1",
        "--no-report",
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "KILL_AFTER": "3"}
    killed_run = subprocess.run(
        [sys.executable, "-c", KILL_AFTER_NTH_STORED_CELL, *args], env=env, capture_output=True, timeout=600
    )
    assert killed_run.returncode == -signal.SIGKILL, killed_run.stderr
    db = out / "results.sqlite"
    killed = {r.key: r.finished for r in ResultStore(db).records()}
    total = len(expand_grid(load_config(path)))
    assert len(killed) == 3 < total
    rerun = subprocess.run(
        [sys.executable, "-m", "leakshield", *args], env=env, capture_output=True, text=True, timeout=600
    )
    assert rerun.returncode == 0, rerun.stderr
    assert f"{total - len(killed)} computed, {len(killed)} already stored" in rerun.stdout
    with sqlite3.connect(db) as conn:
        keys = [row[0] for row in conn.execute("SELECT key FROM cells")]
    assert len(keys) == len(set(keys)) == total
    after = {r.key: r.finished for r in ResultStore(db).records()}
    assert all(after[k] == v for k, v in killed.items()), "finished cells must not be recomputed"


def test_config_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "missing.yaml")
    bad = write_config(tmp_path / "bad.yaml", "models: [lenet\n  attacks: {")
    with pytest.raises(ConfigError, match="not valid YAML at line"):
        load_config(bad)
    listing = write_config(tmp_path / "list.yaml", "- lenet\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(listing)


def test_model_cache_continues_training_deterministically(tmp_path):
    """Attacking at rounds [1, 2] reuses round 1 to reach round 2, with the same result as from scratch."""
    from leakshield.experiment.pipeline import ExperimentContext

    cfg = parse_config(tiny_config(attack={"rounds": [1, 2], "update": {"algorithm": "fedsgd"}}))
    ctx = ExperimentContext(cfg, torch.device("cpu"))
    model, defense = cfg.models[0], cfg.defenses[0]
    ctx.models.at_round(model, defense, 0, 1)
    continued = {
        k: v.clone() for k, v in ctx.models.at_round(model, defense, 0, 2).model.state_dict().items()
    }
    fresh = (
        ExperimentContext(cfg, torch.device("cpu")).models.at_round(model, defense, 0, 2).model.state_dict()
    )
    assert all(torch.equal(continued[k], fresh[k]) for k in fresh)
    assert json.dumps(sorted(continued)) == json.dumps(sorted(fresh))


def test_multi_round_attacks_receive_one_view_per_round(tmp_path, monkeypatch):
    """An attack with rounds_observed = 3 gets three views of the same victim at rounds r, r+1, r+2."""
    from leakshield.attacks import ATTACKS, Attack, Reconstruction
    from leakshield.registry import Entry, NoParams

    seen: list[list[int]] = []

    class Watcher(Attack):
        @property
        def rounds_observed(self) -> int:
            return 3

        def reconstruct_from_rounds(self, views, *, seed=0):
            seen.append([v.round for v in views])
            biases = [v.model.classifier.bias.detach().clone() for v in views]
            assert not torch.equal(biases[0], biases[1]), "the model must train between observations"
            assert all(v.batch_size == 1 and v.labels is None for v in views)
            shape = views[0].data_info.shape
            return Reconstruction(images=torch.full((1, *shape), 0.5))

    entry = Entry("watcher", Watcher, "test attack", params=NoParams, threat=OBSERVER)
    monkeypatch.setitem(ATTACKS._entries, "watcher", entry)
    cfg = parse_config(tiny_config(attacks=["watcher"], attack={"rounds": [1]}))
    summary = ExperimentRunner(cfg, tmp_path / "run", device="cpu", progress=False).run()
    assert summary.failed == 0
    assert seen == [[1, 2, 3], [1, 2, 3]]  # two victims, three rounds each


def test_malicious_server_attack_runs_through_the_pipeline(tmp_path):
    """The imprint attack modifies the model before the victim computes its update (prepare_model)."""
    cfg = parse_config(
        tiny_config(
            attacks=[{"name": "imprint", "bins": 32}], victims={"count": 1, "batch_size": 4, "seed": 0}
        )
    )
    summary = ExperimentRunner(cfg, tmp_path / "run", device="cpu", progress=False).run()
    assert summary.failed == 0
    attack = next(r for r in ResultStore(tmp_path / "run" / "results.sqlite").records() if r.kind == "attack")
    assert attack.metrics["psnr"] > 30 and attack.metrics["asr"] >= 0.5


def test_every_registered_attack_is_selectable_from_a_config():
    from leakshield.attacks import ATTACKS

    names = ATTACKS.names()
    assert {
        "dlg",
        "idlg",
        "ig",
        "cpl",
        "gradinversion",
        "lbfgs-l2",
        "adam-cosine",
        "lbfgs-cosine",
        "adam-l1",
        "adam-l2",
        "sgd-cosine",
        "analytic",
        "imprint",
    } <= set(names)
    cfg = parse_config(
        tiny_config(
            attacks=[
                {"name": n, "iterations": 5} if "iterations" in ATTACKS.get(n).params.model_fields else n
                for n in names
            ]
        )
    )
    assert [a.name for a in cfg.attacks] == names
    assert all(ATTACKS.get(n).reference for n in names)


def pairs(cfg):
    return {(c.defense.display, c.attack.display) for c in expand_grid(cfg) if c.kind == "attack"}


def test_adaptive_attacks_meet_only_their_targets_unless_against_says_otherwise():
    cfg = parse_config(
        tiny_config(
            defenses=[
                "none",
                {"name": "pruning", "label": "p"},
                "soteria",
                {"stack": ["mixup", "gaussian-noise"]},
            ],
            attacks=[
                "ig",
                "pruning-aware",
                "soteria-bypass",
                "noise-aware",
                {"name": "ig", "label": "ig-p", "against": ["p"]},
            ],
        )
    )
    assert pairs(cfg) == {
        ("none", "ig"),
        ("p", "ig"),
        ("soteria", "ig"),
        ("mixup+gaussian-noise", "ig"),
        ("p", "pruning-aware"),
        ("soteria", "soteria-bypass"),
        ("mixup+gaussian-noise", "noise-aware"),  # a stack containing a target counts
        ("p", "ig-p"),
    }
    with pytest.raises(ConfigError, match=r"attacks\[0\]\.against: unknown defense labels \['q'\]"):
        parse_config(tiny_config(attacks=[{"name": "ig", "against": ["q"]}]))
    with pytest.raises(ConfigError, match=r"models\[0\]\.against"):
        parse_config(tiny_config(models=[{"name": "lenet", "against": ["none"]}]))


def test_every_defense_runs_through_the_pipeline_and_dp_epsilon_reaches_the_table(tmp_path):
    from leakshield.defenses import DEFENSES

    cheap = {
        "soteria": {"score_samples": 1},
        "dcs2": {"steps": 3},
        "loda": {"steps": 3, "epochs": 1},
        "antigan": {"cgan_steps": 2, "finetune_steps": 1, "width": 8, "batch_size": 8, "extractor_epochs": 1},
        "dc": {"ipc": 2, "iterations": 1, "width": 8, "outer_loop": 2, "inner_loop": 1},
        "dsa": {"ipc": 2, "iterations": 1, "width": 8, "outer_loop": 2, "inner_loop": 1},
        "dm": {"ipc": 2, "iterations": 2, "width": 8},
        "dp-merf": {"ipc": 2, "steps": 3, "features": 64},
        "gs-wgan": {
            "ipc": 2,
            "shards": 2,
            "pretrain_steps": 1,
            "max_steps": 2,
            "width": 8,
            "critic_widths": [8],
        },
    }
    defenses = [{"name": n, **cheap[n]} if n in cheap else n for n in DEFENSES.names()] + [
        {"stack": ["mixup", "gaussian-noise"]}
    ]
    cfg = parse_config(
        tiny_config(
            defenses=defenses,
            victims={"count": 1, "batch_size": 1, "seed": 0},
            report={"rows": ["defense", "attack"], "columns": ["metric"], "values": ["ssim", "epsilon"]},
        )
    )
    out = tmp_path / "run"
    summary = ExperimentRunner(cfg, out, device="cpu", progress=False).run()
    assert summary.failed == 0
    files = build_report(out)
    csv_text = files.csv.read_text()
    header = csv_text.splitlines()[0].split(",")
    dp_row = next(
        line.split(",") for line in csv_text.splitlines() if line.startswith("utility,lenet,dp-sgd")
    )
    epsilon = float(dp_row[header.index("epsilon")])
    assert 0 < epsilon < float("inf")
    table = files.markdown.read_text()
    assert "| dp-sgd · ig |" in table and f"{epsilon:.3f}" in table
    # a changed report layout (not part of the results) takes effect on the next run of the same config
    cfg2 = parse_config(
        tiny_config(
            defenses=defenses,
            victims={"count": 1, "batch_size": 1, "seed": 0},
            report={"rows": ["metric"], "columns": ["defense"], "values": ["ssim"]},
        )
    )
    ExperimentRunner(cfg2, out, device="cpu", progress=False).run()
    assert (
        build_report(out)
        .markdown.read_text()
        .splitlines()[1]
        .startswith("| metric | antigan | ats | augmentation |")
    )


def test_sensitive_victims_and_one_defended_client_reach_the_table(tmp_path):
    """DCS²'s setting: victims drawn from client 0's sensitive samples (put last, flagged), the
    sensitive images' own scores, accuracy on the sensitive samples, only client 0 defended."""
    rule = {"sensitive": "fraction", "fraction": 0.25, "seed": 0}
    cfg = parse_config(
        tiny_config(
            fl={
                "clients": 2,
                "local": {"algorithm": "fedavg", "local_lr": 0.1, "batch_size": 32},
                "defended_clients": [0],
            },
            victims={"count": 2, "batch_size": 2, "seed": 0, "sensitive": 1},
            metrics={"sensitive": rule},
            defenses=["none", {"name": "dcs2", "steps": 3, **rule}],
            attacks=[{"name": "ig", "iterations": 5}, {"name": "dcs2-extra", "iterations": 5}],
        )
    )
    out = tmp_path / "run"
    assert ExperimentRunner(cfg, out, device="cpu", progress=False).run().failed == 0
    records = ResultStore(out / "results.sqlite").records()
    attack = next(r for r in records if r.kind == "attack" and r.defense == "dcs2" and r.attack == "ig")
    assert {"ssim_sensitive", "psnr_sensitive", "asr_sensitive"} <= set(attack.metrics)
    flags = [v["sensitive"] for v in attack.victims]
    assert flags == [[0.0, 1.0], [0.0, 1.0]]
    assert attack.metrics["ssim_sensitive"] == pytest.approx(sum(v["ssim"][1] for v in attack.victims) / 2)
    utility = {r.defense: r.metrics for r in records if r.kind == "utility"}
    for metrics in utility.values():  # the same samples for every row
        assert metrics["sensitive_samples"] == utility["none"]["sensitive_samples"] > 0
        assert 0 <= metrics["accuracy_sensitive"] <= 1
    with pytest.raises(ConfigError, match=r"victims\.sensitive needs metrics\.sensitive"):
        parse_config(tiny_config(victims={"count": 1, "batch_size": 1, "sensitive": 1}))


SHIPPED = sorted(CONFIGS.glob("*.yaml"))


#: a search config; presets (test_leaderboard); a membership config (test_membership_section)
NOT_EXPERIMENTS = ("ats-search.yaml", "leaderboard.yaml", "membership-fedmia-cifar100.yaml")


@pytest.mark.parametrize("path", [p for p in SHIPPED if p.name not in NOT_EXPERIMENTS], ids=lambda p: p.name)
def test_every_shipped_experiment_config_is_valid(path):
    """(ats-search.yaml is a search config: the next test; leaderboard.yaml holds presets.)"""
    from leakshield.experiment import load_config
    from leakshield.experiment.cells import expand_grid

    assert expand_grid(load_config(path))


def test_the_shipped_search_config_is_valid():
    from leakshield.cli_ats import load_search_config

    assert load_search_config(CONFIGS / "ats-search.yaml")
