"""The front door: a README that fits a screen (its generated Results a compact table per threat model,
every table on the results page beside the export), and the leaderboard command refusing what a new
user gets wrong before it runs anything."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from leakshield.cli import main
from leakshield.data import load_dataset
from leakshield.errors import ConfigError, LeakshieldError
from leakshield.experiment.compatibility import check_attacks_fit_models
from leakshield.experiment.config import parse_config
from leakshield.leaderboard.budget_tables import TITLE as BUDGET_TITLE
from leakshield.leaderboard.front_door import budget_summary, compact_results, compact_table
from leakshield.leaderboard.published import check, rerender
from leakshield.leaderboard.tables import Table

from helpers import tiny_config, write_config

ROOT = Path(__file__).resolve().parents[1]
#: the README's length limit, generated block included (details belong in the manual)
README_LINES = 250


def test_the_readme_fits_the_front_door_limit() -> None:
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_LINES, f"README.md has {lines} lines; the front door holds {README_LINES}"


HEADER = ["rank · letters", "model · defense", "strongest attack (round) · victims", "leaked victims (95 % CI)",  # noqa: E501
          "PSNR", "accuracy (95 % CI)", "cost", "front"]  # fmt: skip


def row(rank: str, defense: str, leaked: str, accuracy: str, model: str = "lenet") -> list[str]:
    return [rank, f"{model} · {defense}", "ig@0", leaked, "12.0", accuracy, "1.0×", ""]


def shown(text: str) -> list[str]:
    return [
        line.split(" | ")[1] for line in text.splitlines() if line.startswith("| ") and "rank" not in line
    ]


def test_a_compact_table_shows_the_top_ranked_rows_and_names_those_that_do_not_train() -> None:
    """The ranking gates (:func:`leakshield.leaderboard.ranking.standings`); the compact table shows
    the top ranked rows and the undefended one, and names the gated rows in a paragraph."""
    rows = [
        row("1 · a", "dm", "0/8 = 0.00 [0.00, 0.60]", "0.950 ± 0.007"),
        row("2 · a", "row-guard (stale)", "0/8 = 0.00 [0.00, 0.60]", "—"),  # no utility cell: not claimed
        row("3 · a", "dp-sgd", "0/8 = 0.00 [0.00, 0.60]", "0.884 ± 0.052"),
        row("4 · b", "mixup", "2/8 = 0.25 [0.03, 0.65]", "0.952 ± 0.011"),
        row("5 · b", "precode", "3/8 = 0.38 [0.09, 0.76]", "0.953 ± 0.000"),
        row("6 · c", "none", "8/8 = 1.00 [0.63, 1.00]", "0.967 ± 0.007"),
        row("does not train", "augmentation", "0/8 = 0.00 [0.00, 0.60]", "0.463 ± 0.178"),
        row("does not train", "instahide (stale)", "1/8 = 0.12 [0.00, 0.53]", "0.099 ± 0.035"),
    ]
    text = compact_table(Table("Honest-but-curious server", HEADER, rows), "docs/leaderboard/x.md")
    assert shown(text) == ["lenet · dm", "lenet · dp-sgd", "lenet · mixup", "lenet · none"]
    assert "PSNR" not in text and "cost" not in text  # the page has every column
    assert ("Does not pass the utility gate (accuracy under chance + ½ (undefended − chance), or a guard "
            "refusing most honest models; not compared): lenet · augmentation (accuracy 0.463 ± 0.178), lenet · instahide (stale) (accuracy "  # noqa: E501
            "0.099 ± 0.035).") in text  # fmt: skip
    assert "4 more rows on the [results page](docs/leaderboard/x.md) (2 sharing a letter with a row shown)." in text  # noqa: E501
    assert "|\n\nDoes not pass" in text  # a paragraph after the table, not a row of it
    assert compact_table(Table("t", HEADER, []), "p.md") == ""
    assert compact_table(Table("t", ["rank", "defense"], [["1", "x"]]), "p.md") == ""


def test_the_text_sections_tables_are_compacted_after_the_images_under_their_own_heading() -> None:
    """The text tables name the score ROUGE-2 and the unit a text: the same columns are kept."""
    text_header = ["rank · letters", "model · defense", "strongest attack (round) · victims", "leaked texts (95 % CI)",  # noqa: E501
                   "ROUGE-2 (95 % CI)", "ROUGE-1", "accuracy (95 % CI)", "front"]  # fmt: skip
    rows = [
        ["1 · a", "bert · quantization", "tag@10", "0/16 = 0.00 [0.00, 0.21]", "0.05 ≈ guess", "0.3",
         "0.660 ± 0.004", "●"],
        ["2 · b", "bert · none", "dager@0", "16/16 = 1.00 [0.79, 1.00]", "1.000", "1.0", "0.664 ± 0.002", ""],
        ["does not train", "bert · pruning", "dager@0", "0/16 = 0.00 [0.00, 0.21]", "0.1", "0.2",
         "0.556 ± 0.000", ""],
    ]  # fmt: skip
    image = Table("Honest-but-curious server", HEADER, [row("1 · a", "none", "8/8 = 1.00 [0.63, 1.00]", "0.967")])  # noqa: E501
    text = Table("Text · Honest-but-curious server (catalogue C)", text_header, rows)
    out = compact_results([image], 0.4, "p.md", [text])
    head, _, tail = out.partition("### Text: federated language models")
    assert "lenet · none" in head and "bert" not in head
    assert shown(tail) == ["bert · quantization", "bert · none"]
    assert "| 0/16 = 0.00 [0.00, 0.21] | 0.660 ± 0.004 | ● |" in tail  # ROUGE-1 and -2 dropped
    assert "not compared): bert · pruning (accuracy 0.556 ± 0.000)" in tail
    assert "### Text" not in compact_results([image], 0.4, "p.md")  # no text section: no heading


BUDGET_HEADER = ["budget", "rank · letters", "model · defense", "rung", "strongest attack",
                 "margin ↓ (95 % CI)", "vs no defense (simultaneous CI)", "leaked victims (95 % CI)",
                 "accuracy cost", "accuracy (95 % CI)"]  # fmt: skip


def budget_row(budget: str, rank: str, defense: str, versus: str, cost: str = "0.010 [≤ 0.015]") -> list[str]:
    margin = "0.1 [0.0, 0.2]"
    return [budget, rank, f"lenet · {defense}", "σ 0.01", "ig@0", margin, versus, "0/16", cost, "0.95"]


def test_the_readme_names_the_most_private_defense_within_two_points_per_adversary() -> None:
    """Per threat: the best-placed defended row at ≤ 2 points (not no defense, not a row of another
    budget, not a gated row), its difference from no defense and cost, and the defended rows sharing its
    letter; a threat with no defended row at that budget is left out."""
    honest = Table(f"{BUDGET_TITLE}: Honest-but-curious server (catalogue C, D, E)", BUDGET_HEADER, [
        budget_row("≤ 1 pts", "1 · a", "clipping", "−0.50 [−0.60, −0.40] *"),
        budget_row("≤ 2 pts", "1 · a", "none", "reference", "0"),
        budget_row("≤ 2 pts", "3 · ab", "pruning", "−0.30 [−0.50, −0.10] *"),
        budget_row("≤ 2 pts", "2 · a", "dp-sgd", "−0.59 [−0.60, −0.58] *", "0.018 [≤ 0.019]"),
        budget_row("≤ 2 pts", "4 · c", "mixup", "−0.10 [−0.20, 0.00]"),
        budget_row("≤ 2 pts", "does not train", "instahide", "—"),
        budget_row("≤ 5 pts", "1 · a", "dm", "−0.59 [−0.60, −0.58] *"),
    ])  # fmt: skip
    server = Table(f"{BUDGET_TITLE}: Malicious server", BUDGET_HEADER,
                   [budget_row("≤ 2 pts", "1 · a", "none", "reference", "0")])  # fmt: skip
    ranking = Table("Honest-but-curious server", HEADER, [row("1 · a", "none", "8/8", "0.967")])
    out = budget_summary([ranking, honest, server], "p.md")
    body = [line for line in out.splitlines() if line.startswith("| ") and "adversary" not in line]
    assert body == ["| Honest-but-curious server | lenet · dp-sgd | σ 0.01 | −0.59 [−0.60, −0.58] * | 0/16 | "
                    "0.018 [≤ 0.019] | 1 |"]  # fmt: skip
    assert out.startswith("### Within 2 points of accuracy") and "[results page](p.md)" in out
    assert budget_summary([ranking, server], "p.md") == "" and budget_summary([], "p.md") == ""
    assert "### Within 2 points" in compact_results([ranking, honest], 0.4, "p.md")
    assert "rows not shown different" in budget_summary([honest], "p.md", budget=5)  # any budget
    secure = Table(f"{BUDGET_TITLE}: Malicious server under secure aggregation", BUDGET_HEADER, [
        budget_row("≤ 2 pts", "1 · a", "gaussian-noise", "−0.001 [−0.006, +0.004]"),
        budget_row("≤ 2 pts", "2 · a", "none", "reference", "0"),
    ])  # fmt: skip
    assert "| −0.001 [−0.006, +0.004] (not shown to leak less) |" in budget_summary([secure], "p.md")
    assert "to leak less)" not in budget_summary([honest], "p.md")  # a starred row needs no such words


def test_the_published_readme_and_results_page_are_checked_together(tmp_path: Path) -> None:
    shutil.copyfile(ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(ROOT / "docs" / "leaderboard", tmp_path / "docs" / "leaderboard")
    readme, page = tmp_path / "README.md", tmp_path / "docs" / "leaderboard" / "standard.md"
    assert check(readme).faithful
    assert page.read_text().count("\n### ") > readme.read_text().count("\n### ")  # every table is there
    page.write_text(page.read_text().replace("| 0.884 [0.794, 0.974] |", "| 0.984 [0.794, 0.974] |"))
    verdict = check(readme)
    assert not verdict.faithful and any("results page" in line for line in verdict.lines)
    page.unlink()
    assert any("is missing" in line for line in check(readme).lines)
    page.mkdir()
    assert any("is a folder" in line for line in check(readme).lines)
    export = tmp_path / "docs" / "leaderboard" / "standard.json"
    with pytest.raises(LeakshieldError, match="is a folder"):
        rerender(readme, export)
    page.rmdir()
    page.write_text("# my notes\n")  # a file of the user's where the page would go: never overwritten
    with pytest.raises(LeakshieldError, match="was not written by leakshield"):
        rerender(readme, export)
    assert page.read_text() == "# my notes\n"
    page.unlink()
    rerender(readme, export)
    assert check(readme).faithful


BOARD = {
    "base": {
        "name": "lb-door",
        "dataset": {"name": "digits", "channels": 1, "size": 8},
        "models": ["mlp"],
        "fl": {"clients": 2},
        "attack": {"rounds": [0], "update": {"algorithm": "fedsgd"}},
        "victims": {"count": 1, "batch_size": 1},
        "defenses": ["none"],
        "attacks": [{"name": "idlg", "iterations": 2}],
        "utility": {"rounds": 0},
    },
    "presets": {"quick": {}},
}


@pytest.mark.parametrize(
    "layout, extra, said",
    [
        ("docs-is-a-file", ["--readme", "d/README.md"], "d/docs is a file; the run writes"),
        ("export-is-a-folder", ["--readme", "d/README.md"], "quick.json is a folder; the run writes a file"),
        ("plain", ["--readme", "d"], "--readme d: a folder; give a file"),
        ("plain", ["--check", "d"], "--check d: a folder; give a file"),
        ("export-is-a-folder", ["--from-export", "d/docs/leaderboard/quick.json", "--readme", "d/README.md"],
         "--from-export d/docs/leaderboard/quick.json: a folder"),
    ],
)  # fmt: skip
def test_leaderboard_output_paths_are_checked_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, layout: str,
    extra: list[str], said: str,
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    write_config(tmp_path / "board.yaml", BOARD)  # a run of seconds, should the refusal break
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "README.md").write_text("# project\n")
    if layout == "docs-is-a-file":
        (tmp_path / "d" / "docs").write_text("")
    elif layout == "export-is-a-folder":
        (tmp_path / "d" / "docs" / "leaderboard" / "quick.json").mkdir(parents=True)
    args = ["leaderboard", "--config", "board.yaml", "--preset", "quick", "--out", "run", "--quiet"]
    assert main([*args, "--device", "cpu", *extra]) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()  # refused before any cell


def test_an_attack_that_cannot_work_on_a_model_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    data = load_dataset("digits", {"channels": 1, "size": 8})
    for attack in ("trap-weights", "cocktail-party"):
        conv = parse_config(tiny_config(attacks=[attack], models=["lenet"]))
        with pytest.raises(
            ConfigError, match=rf"attacks\[0\] \({attack}\) cannot attack models\[0\] \(lenet\)"
        ):
            check_attacks_fit_models(conv, data.info)
        check_attacks_fit_models(parse_config(tiny_config(attacks=[attack], models=["mlp"])), data.info)
    check_attacks_fit_models(parse_config(tiny_config(attacks=["ig"], models=["lenet"])), data.info)
    config = write_config(tmp_path / "c.yaml", tiny_config(attacks=["trap-weights"], models=["lenet"]))
    assert main(["run", str(config), "--out", str(tmp_path / "run"), "--quiet"]) == 2
    assert "cannot attack models[0] (lenet)" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "options",
    [["--check", "R.md", "--readme", "R.md"], ["--check", "R.md", "--tune"], ["--tune", "--readme", "R.md"],
     ["--from-export", "x.json", "--readme", "R.md", "--dry-run"]],
)  # fmt: skip
def test_leaderboard_options_that_would_be_ignored_are_refused(
    options: list[str], capsys: pytest.CaptureFixture
) -> None:
    assert main(["leaderboard", *options]) == 2
    assert "not both" in capsys.readouterr().err


def test_an_unwritable_readme_or_docs_folder_is_refused_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Permissions simulated (the suite may run as root, who may write anywhere)."""
    monkeypatch.chdir(tmp_path)
    write_config(tmp_path / "board.yaml", BOARD)
    (tmp_path / "README.md").write_text("# project\n")
    args = ["leaderboard", "--config", "board.yaml", "--out", "run", "--quiet", "--readme", "README.md"]
    refused = {"README.md"}
    monkeypatch.setattr(os, "access", lambda path, mode: str(path) not in refused)
    assert main(args) == 2 and "README.md: not writable" in capsys.readouterr().err
    refused = {"."}  # the folder docs/leaderboard/ would be made in
    assert (
        main(args) == 2
        and ". is not writable; the run writes docs/leaderboard/quick.json" in capsys.readouterr().err
    )
    assert not (tmp_path / "run").exists()


def test_a_scenario_an_attack_cannot_work_in_is_refused_before_the_main_grid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    board = {**BOARD, "scenarios": {"tw": {"title": "trap weights", "attacks": ["trap-weights"],
                                          "models": ["lenet"]}},
             "presets": {"quick": {"scenarios": ["tw"]}}}  # fmt: skip
    write_config(tmp_path / "board.yaml", board)
    assert main(["leaderboard", "--config", "board.yaml", "--out", "run", "--quiet"]) == 2
    assert "cannot attack models[0] (lenet)" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # the main grid did not run first
