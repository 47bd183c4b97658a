"""The membership section: the ranking sees a planted difference and not a null one (both rates measured
through the real code), the gate and the control, and ``leakshield membership`` end to end (tiny)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from leakshield.cli import main
from leakshield.membership.run import Guarantee, SeedRun
from leakshield.membership.section import rank, standing

SEEDS = range(6)


def _run(row: str, seed: int, shift: float, rng: np.random.Generator, accuracy: float = 0.9,
         guarantees: tuple[Guarantee, ...] = ()) -> SeedRun:  # fmt: skip
    """300 candidates (150 per stage, half members); member scores shifted by ``shift`` standard
    deviations in the one cell ``loss@0`` (a second cell, ``gradient-norm@0``, carries nothing)."""
    member = np.tile(np.r_[np.ones(15, bool), np.zeros(15, bool)], 10)
    stage = np.repeat([1, 2], 150)
    score = rng.normal(size=300) + shift * member
    return SeedRun(row, seed, member.tolist(), stage.tolist(),
                   {"loss@0": score.tolist(), "gradient-norm@0": rng.normal(size=300).tolist()},
                   accuracy, 0.1, 0.0, list(guarantees))  # fmt: skip


def _table(shift_none: float, shift_defense: float, rng: np.random.Generator, threat: str = "server"):
    runs = {"none": [_run("none", s, shift_none, rng) for s in SEEDS],
            "d": [_run("d", s, shift_defense, rng) for s in SEEDS],
            "e": [_run("e", s, shift_none, rng) for s in SEEDS]}  # fmt: skip
    return rank([standing(name, threat, rs, 0.01) for name, rs in runs.items()], 0.01)


def test_ranking_sees_a_planted_effect_and_not_a_null():
    """Planted: the defense d shifts members by 1.0 SD against none's 2.5 → d is shown below none in
    at least 90 % of 60 tables (measured 57/60). Null: d and e are distributed as none → any row shown
    below none in at most 5 % of 60 tables (measured 1/60; 3 of 300 in a longer run, seed 12)."""
    rng = np.random.default_rng(11)
    caught = 0
    for _ in range(60):
        rows, control = _table(2.5, 1.0, rng)
        assert control
        caught += next(r for r in rows if r.row == "d").difference.less
    false = 0
    for _ in range(60):
        rows, _ = _table(2.5, 2.5, rng)
        false += any(r.difference is not None and r.difference.less for r in rows)
    assert caught / 60 >= 0.9
    assert false / 60 <= 0.05


def test_strongest_cell_is_chosen_on_stage_one_and_control_and_gate():
    rng = np.random.default_rng(2)
    rows, control = _table(2.5, 1.0, rng)
    assert all(r.strongest == "loss@0" for r in rows)  # the cell that carries the signal
    assert control and rows[0].row == "d"  # the defense that cuts the shift is the most private
    means = [r.tpr.mean for r in rows if r.place is not None]
    assert means == sorted(means)  # most private first
    # nothing to find in no defense: the control fails and nothing ranks
    rows, control = _table(0.0, 0.0, rng)
    assert not control and all(r.place is None for r in rows)
    # a row whose accuracy is below chance + ½ (undefended − chance) does not train
    runs = {"none": [_run("none", s, 2.5, rng) for s in SEEDS],
            "broken": [_run("broken", s, 0.0, rng, accuracy=0.3) for s in SEEDS]}  # fmt: skip
    rows, _ = rank([standing(n, "server", rs, 0.01) for n, rs in runs.items()], 0.01)
    broken = next(r for r in rows if r.row == "broken")
    assert not broken.trains and broken.place is None


def test_central_dp_covers_the_global_models_not_the_server():
    """A central-DP guarantee (server False) is no bound on what the server sees: its row says so in the
    server's table and is audited only in the global one; a record-level guarantee covers both."""
    rng = np.random.default_rng(4)
    central = (Guarantee(3.0, 1e-5, "client", server=False),)
    runs = [_run("dp-fedavg", s, 2.5, rng, guarantees=central) for s in SEEDS]
    server, global_ = standing("dp-fedavg", "server", runs, 0.01), standing("dp-fedavg", "global", runs, 0.01)
    assert server.uncovered and server.epsilon is None and server.audit is None
    assert global_.epsilon == 3.0 and global_.epsilon_unit == "client" and global_.audit is not None
    both = (Guarantee(8.0, 1e-5), *central)  # DP-SGD under central DP: the tightest that applies
    runs = [_run("stack", s, 2.5, rng, guarantees=both) for s in SEEDS]
    assert standing("stack", "server", runs, 0.01).epsilon == 8.0
    assert standing("stack", "global", runs, 0.01).epsilon == 3.0


def test_global_table_uses_only_global_view_cells():
    rng = np.random.default_rng(3)
    runs = [_run("none", s, 2.5, rng) for s in SEEDS]
    found = standing("none", "global", runs, 0.01)
    assert found.strongest == "gradient-norm@0"  # loss@0 reads one client's update: not in this view


TINY = """\
clients: 4
records_per_client: 8
rounds: 2
model: {name: mlp, hidden_layers: 1, width: 16}
local: {algorithm: fedavg, local_lr: 0.1, local_epochs: 1, batch_size: 4}
seeds: [0, 1]
rows:
  - {label: none}
  - {label: dp-sgd, stack: [{name: dp-sgd, noise_multiplier: 1.0}]}
  - {label: secure aggregation, secure_aggregation: true}
"""


def test_membership_command_end_to_end_and_resume(tmp_path, capsys):
    config = tmp_path / "m.yaml"
    config.write_text(TINY, encoding="utf-8")
    out = tmp_path / "out"
    assert main(["membership", str(config), "--out", str(out), "--quiet", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "6 runs (0 reused" in printed and "honest-but-curious server" in printed
    for name in ("membership.md", "membership.html", "membership.json", "membership_roc_server.png",
                 "membership_roc_global.png"):  # fmt: skip
        assert (out / name).stat().st_size > 0
    export = json.loads((out / "membership.json").read_text(encoding="utf-8"))
    server = export["tables"]["server"]
    labels = [row[1] for row in server["rows"]]
    assert sorted(labels) == ["dp-sgd", "none", "secure aggregation"]
    dp = next(row for row in server["rows"] if row[1] == "dp-sgd")
    assert dp[9] != "—" and dp[10].startswith("TPR ≤") and "measured" in dp[10]  # ceiling, audit
    secagg = next(row for row in server["rows"] if row[1] == "secure aggregation")
    assert secagg[2].startswith(("global-", "gradient-norm"))  # the server sees only the global models
    assert "leakshield membership" in export["command"]
    assert main(["membership", str(config), "--out", str(out), "--quiet", "--device", "cpu"]) == 0
    assert "6 runs (6 reused" in capsys.readouterr().out
    from leakshield.leaderboard.verdicts import VERDICTS

    from helpers import benchmark_script

    rows = benchmark_script("membership_rows").rows(out)  # the reproductions page's FedMIA rows
    assert len(rows) == 2 and all(
        r.startswith("| FedMIA") and r.split("|")[-2].strip() in VERDICTS for r in rows
    )


def test_membership_command_errors_are_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("records_per_client: 1\n", encoding="utf-8")
    assert main(["membership", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "records_per_client" in err and "greater than or equal to 2" in err
    bad.write_text("records_per_client: 400\n", encoding="utf-8")
    assert main(["membership", str(bad)]) == 2
    assert "exceeds the 1150 training records" in capsys.readouterr().err
    bad.write_text("seeds: 3\n", encoding="utf-8")
    assert main(["membership", str(bad), "--seeds", "2"]) == 2
    assert "not a list" in capsys.readouterr().err
    bad.write_text("rows: [{label: none}, {label: x, stack: [{name: no-such-defense}]}]\n", encoding="utf-8")
    assert main(["membership", str(bad)]) == 2
    assert "no-such-defense" in capsys.readouterr().err
    assert main(["membership"]) == 2
    assert "--preset" in capsys.readouterr().err
    assert main(["membership", "--preset", "quick", "--print-config"]) == 0
    assert "rounds: 10" in capsys.readouterr().out


def test_membership_dry_run_estimates(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default output folder is runs/ under the working directory
    config = tmp_path / "m.yaml"
    config.write_text(TINY, encoding="utf-8")
    assert main(["membership", str(config), "--dry-run", "--device", "cpu"]) == 0
    line = capsys.readouterr().out
    assert "3 defenses × 2 seeds" in line and "estimated" in line
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("preset", ["quick", "standard"])
def test_presets_validate(preset, capsys):
    assert main(["membership", "--preset", preset, "--print-config"]) == 0
    assert "none" in capsys.readouterr().out


def test_the_strongest_cell_is_chosen_on_stage_one_only():
    """A cell that leaks on stage 1 only against one that leaks on stage 2 only: selection must read
    stage 1 (reading stage 2 would choose on the candidates it then measures)."""
    rng = np.random.default_rng(6)
    runs = []
    for seed in SEEDS:
        member = np.tile(np.r_[np.ones(15, bool), np.zeros(15, bool)], 10)
        stage = np.repeat([1, 2], 150)
        early = rng.normal(size=300) + 3.0 * (member & (stage == 1))
        late = rng.normal(size=300) + 3.0 * (member & (stage == 2))
        runs.append(SeedRun("none", seed, member.tolist(), stage.tolist(),
                            {"loss@0": early.tolist(), "loss@29": late.tolist()}, 0.9, 0.1, 0.0))  # fmt: skip
    found = standing("none", "server", runs, 0.01)
    assert found.strongest == "loss@0"
    assert found.tpr is not None and found.tpr.mean < 0.1  # measured on stage 2, where it carries nothing


def test_the_papers_protocol_config_validates(capsys):
    """configs/membership-fedmia-cifar100.yaml (a GPU's) validates; without the CIFAR-100 files a run
    stops at one line naming them, before any work."""
    from pathlib import Path

    config = Path(__file__).resolve().parents[1] / "configs" / "membership-fedmia-cifar100.yaml"
    assert main(["membership", str(config), "--print-config"]) == 0
    assert "records_per_client: 5000" in capsys.readouterr().out
    assert main(["membership", str(config), "--dry-run", "--data-root", "/nonexistent"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cifar100" in err.lower()
