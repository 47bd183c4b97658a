"""The leaderboard's text section: text cells ranked per threat model by the images' rule (planted cases
it must catch), and the section run end to end beside a tiny image leaderboard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from leakshield.cli import main
from leakshield.experiment.store import CellRecord
from leakshield.leaderboard.export import export_json, text_from_json
from leakshield.leaderboard.presets import load_text_leaderboard, text_data
from leakshield.leaderboard.text_section import ranking_records, text_tables
from leakshield.text_grid.attacks import TEXT_ATTACKS

ROUNDS = 5


def _cell(
    defense: str,
    seed: int,
    state: str,
    r2: list[list[float]],
    *,
    accuracy: float = 0.8,
    attack: str = "tag",
    floor: float | list[list[float]] = 0.05,
    refused: list[bool] | None = None,
) -> CellRecord:
    """A text cell: ``r2[v][k]`` is victim v's sequence k's ROUGE-2 (``floor``: its guess's, one for
    all or per sequence)."""
    floors = floor if isinstance(floor, list) else [[floor] * len(scores) for scores in r2]
    rows = [{"victim": v, "sequence": k, "rouge1": min(1.0, s + 0.1), "rouge2": s,
             "floor_rouge2": floors[v][k], **({"refused": "row-guard: …"} if refused and refused[v] else {})}
            for v, scores in enumerate(r2) for k, s in enumerate(scores)]  # fmt: skip
    flat = [s for scores in r2 for s in scores]
    metrics = {"rouge2": sum(flat) / len(flat), "rouge1": min(1.0, sum(flat) / len(flat) + 0.1),
               "accuracy": accuracy if state == "trained" else 0.5, "chance": 0.5}  # fmt: skip
    if refused is not None:
        metrics["refused"] = sum(refused) / len(refused)
    return CellRecord(
        key=f"text|{seed}|{defense}|{state}|{attack}", kind="text", model="bert", defense=defense,
        attack=attack, round=None, seed=seed, status="ok", metrics=metrics, victims=rows, error=None,
        images=None, seconds=1.0, finished=0.0, environment={"state": state}, attack_name=attack,
        threat=TEXT_ATTACKS.get(attack).threat.as_json(), scale=f"batch=2 state={state}",
    )  # fmt: skip


def _board(cells: dict[str, tuple[list[list[float]], float]], seeds: int = 4) -> list[CellRecord]:
    """Every defense at both states and ``seeds`` seeds: (per-seed ROUGE-2 rule, accuracy)."""
    out = []
    for defense, (scores, accuracy) in cells.items():
        for seed in range(seeds):
            for state in ("untrained", "trained"):
                out.append(_cell(defense, seed, state, scores(seed), accuracy=accuracy))  # type: ignore[operator]
    return out


def _rows(table) -> dict[str, list[str]]:
    return {row[1].split(" · ")[1]: row for row in table.rows}


def test_the_text_ranking_sees_a_partial_leak_and_gates_a_model_that_does_not_train():
    """Planted: ``none`` leaks every text in every seed; ``half`` leaks both texts of one victim in half
    of the seeds (never "no measurable leakage"); ``safe`` leaks nothing and trains; ``broken`` leaks
    nothing and does not train (accuracy 0.55 < 0.5 + ½ (0.8 − 0.5)): it is shown, never ranked."""
    records = _board({
        "none": (lambda s: [[0.9, 1.0], [0.8, 0.95]], 0.8),
        "half": (lambda s: [[0.9, 0.9], [0.1, 0.0]] if s % 2 else [[0.1, 0.0], [0.0, 0.1]], 0.78),
        "safe": (lambda s: [[0.1, 0.0], [0.05, 0.2]], 0.77),
        "broken": (lambda s: [[0.0, 0.0], [0.0, 0.0]], 0.55),
    })  # fmt: skip
    (table,) = text_tables(records, ROUNDS)
    assert table.title.startswith("Text · Honest-but-curious server")
    assert "ROUGE-2 (95 % CI)" in table.header and "ROUGE-1" in table.header
    assert "SSIM" not in str(table.header)
    rows = _rows(table)
    assert rows["safe"][0] == "1 · a" and rows["safe"][2].startswith("no measurable leakage")
    assert rows["broken"][0] == "does not train"
    assert not rows["half"][2].startswith("no measurable") and rows["half"][0].startswith("2 · ")
    assert rows["half"][6].startswith("2 of 4")  # the seeds with a leak: 1 and 3
    assert rows["none"][0].startswith("3 · ") and rows["none"][6].startswith("4 of 4")
    assert f"0 untrained, {ROUNDS} after FL training" in table.note
    assert "Leaked texts: ROUGE-2 ≥ 0.6 and above the ROUGE-2 of the text's own" in table.note
    assert "victim" not in table.note.replace("victims (each a client's batch", "")


def test_a_text_leaks_only_above_its_own_guess():
    """A reconstruction at ROUGE-2 0.7 leaks nothing when the guess of that text scores 0.8 too."""
    states = ("untrained", "trained")
    cells = [_cell("none", s, st, [[0.7, 0.7]], floor=0.8) for s in range(2) for st in states]
    (table,) = text_tables(cells, ROUNDS)
    assert _rows(table)["none"][2].startswith("no measurable leakage")
    cells = [_cell("none", s, st, [[0.7, 0.7]], floor=0.1) for s in range(2) for st in states]
    assert not _rows(text_tables(cells, ROUNDS)[0])["none"][2].startswith("no measurable leakage")


def test_a_run_whose_undefended_model_did_not_train_says_the_gate_cannot_judge():
    """Planted: every model at chance (0.5, 2 balanced classes): a defense that trains nothing would pass
    the gate unnoticed, so the note says the ranks say nothing about utility."""
    records = _board({"none": (lambda s: [[0.9, 1.0]], 0.5), "dp": (lambda s: [[0.0, 0.1]], 0.5)}, seeds=2)
    (table,) = text_tables(records, ROUNDS)
    assert "The undefended bert did not train (0.500 against chance 0.500)" in table.note
    trained = _board({"none": (lambda s: [[0.9, 1.0]], 0.8), "dp": (lambda s: [[0.0, 0.1]], 0.5)}, seeds=2)
    (table,) = text_tables(trained, ROUNDS)
    assert "did not train" not in table.note and _rows(table)["dp"][0] == "does not train"


def test_each_text_is_judged_against_its_own_guess_in_order():
    """Two victims of two texts, each with its own guess: (0.95 vs 0.9) and (0.62 vs 0.1) leak, (0.65 vs
    0.7) and (0.66 vs 0.68) do not — 2 of 4. Floors reversed within a victim would count 1; one mean
    floor for all (0.595) would count 4."""
    floors = [[0.9, 0.1], [0.7, 0.68]]
    cells = [_cell("none", s, st, [[0.95, 0.62], [0.65, 0.66]], floor=floors)
             for s in range(2) for st in ("untrained", "trained")]  # fmt: skip
    (table,) = text_tables(cells, ROUNDS)
    assert "leaked texts (95 % CI)" in table.header
    assert _rows(table)["none"][5].startswith("4/8 = 0.50")  # both seeds: 2 of 4 texts in each


def test_the_text_tables_name_the_guess_and_come_back_from_an_export():
    cells = _board({"none": (lambda s: [[0.9, 1.0]], 0.8), "safe": (lambda s: [[0.1, 0.2]], 0.79)}, seeds=2)
    tables = text_tables(cells, ROUNDS)
    flat = " ".join(c for t in tables for row in t.rows for c in row)
    assert "≈ guess" in flat and "mean image" not in flat
    exported = export_json([], {}, text=(cells, ROUNDS))
    found = text_from_json(exported)
    assert found is not None and text_tables(*found) == tables
    assert text_from_json(export_json([], {})) is None


def test_a_malicious_servers_table_shows_what_the_guard_caught():
    cells = [
        _cell(d, s, st, [[1.0, 1.0], [1.0, 0.9]], attack="sequence-imprint", floor=0.05,
              refused=[d == "row-guard", d == "row-guard"] if d == "row-guard" else None)
        for d in ("none", "row-guard") for s in range(2) for st in ("untrained", "trained")
    ]  # fmt: skip
    (table,) = text_tables(cells, ROUNDS)
    assert table.title.startswith("Text · Malicious server") and "(catalogue G)" in table.title
    column = next(i for i, h in enumerate(table.header) if h.startswith("caught by guard"))
    assert _rows(table)["row-guard"][column].startswith("100%")
    assert _rows(table)["none"][column] == "—"


def test_bags_of_words_are_left_out_of_the_ranking_but_give_the_trained_models_accuracy():
    bag = _cell("none", 0, "trained", [[1.0]], attack="bag-of-words")
    bag = CellRecord(**{**bag.__dict__, "victims": [{"victim": 0, "rouge1": 1.0, "bag_recall": 1.0}]})
    found = ranking_records([bag, _cell("none", 0, "trained", [[0.9]], accuracy=0.7)], ROUNDS)
    assert [r.kind for r in found] == ["attack", "baseline", "utility"]
    # the trained model's accuracy is read off the first cell of it that succeeded (the bag's here)
    assert found[0].round == ROUNDS and found[2].metrics == {"accuracy": 0.8, "chance": 0.5}


def test_every_preset_has_a_valid_text_section_and_null_drops_it():
    for preset in ("quick", "standard", "full"):
        assert load_text_leaderboard(preset) is not None
    document = {"base": {}, "text": {"track": "text", "name": "t"}, "presets": {"a": {"text": None}, "b": {}}}
    assert text_data(document, "a") is None and text_data(document, "b") == {"track": "text", "name": "t-b"}


TINY_BOARD = {
    "base": {
        "name": "lb-text",
        "dataset": {"name": "digits", "channels": 1, "size": 16},
        "models": [{"name": "lenet", "label": "lenet-tanh", "activation": "tanh", "init_range": None}],
        "fl": {"clients": 2, "local": {"algorithm": "fedavg", "local_lr": 0.1, "batch_size": 16}},
        "attack": {"rounds": [0], "update": {"algorithm": "fedsgd"}, "threat": {"labels_known": True}},
        "victims": {"count": 1, "batch_size": 1},
        "defenses": ["none"], "attacks": [{"name": "ig", "iterations": 5}], "utility": {"rounds": 1},
    },
    "text": {
        "track": "text", "name": "lb-text-text", "seeds": [0, 1], "tokenizer": {"vocab_size": 300},
        "corpus": {"max_train": 300}, "max_length": 24,
        "models": [{"name": "bert", "width": 16, "layers": 1, "heads": 2}],
        "fl": {"clients": 4, "local": {"algorithm": "fedavg", "local_lr": 0.05, "batch_size": 32}},
        "partition": "by-group", "states": ["untrained", "trained"], "training": {"rounds": 1},
        "victims": {"count": 2, "batches": [2]}, "defenses": ["none", "row-guard"],
        "attacks": [{"name": "tag", "iterations": 3}, {"name": "sequence-imprint", "bins": 1024}],
    },
    "presets": {"smoke": {}},
}  # fmt: skip


def test_the_text_section_runs_beside_the_images_and_gets_its_tables(tmp_path: Path, rotten_tomatoes_csv,
                                                                      capsys) -> None:  # fmt: skip
    for module in ("transformers", "tokenizers", "rouge_score"):
        pytest.importorskip(module)
    config, out = tmp_path / "board.yaml", tmp_path / "run"
    config.write_text(yaml.safe_dump(TINY_BOARD))
    args = ["leaderboard", "--config", str(config), "--preset", "smoke", "--out", str(out), "--quiet",
            "--device", "cpu", "--threads", "1"]  # fmt: skip
    assert main([*args, "--corpus", str(tmp_path / "absent.csv")]) == 0
    assert "text section skipped: no corpus at" in capsys.readouterr().out
    assert "No text section in this run" in (out / "leaderboard.html").read_text()
    assert main([*args, "--corpus", str(rotten_tomatoes_csv)]) == 0
    page = (out / "leaderboard.html").read_text()
    assert "Text: federated language models" in page
    assert "Text · Honest-but-curious server" in page and "Text · Malicious server" in page
    assert (out / "text" / "report.html").is_file() and "text/report.html" in page
    assert "### Text · Malicious server" in (out / "leaderboard.md").read_text()
    exported = json.loads((out / "leaderboard.json").read_text())["text"]
    assert exported["rounds"] == 1 and len(exported["cells"]) == 2 * 2 * 2 * 2
    assert all("rouge2" in v for c in exported["cells"] for v in c["victims"])
