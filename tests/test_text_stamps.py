"""Text cells carry component stamps as image cells do (:mod:`leakshield.text_grid.stamps`): each text
attack's stamp reaches its own module and what that imports, a rerun recomputes only the stale cells,
and the text tables mark exactly the rows a stale cell feeds. The published export's text cells are
judged in ``tests/test_provenance.py`` (an edit to the noise defense stales its text rows too)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from test_leaderboard_text import ROUNDS, _cell
from test_text_grid import tiny_config

from leakshield.code_graph import CodeGraph
from leakshield.experiment.store import ResultStore
from leakshield.leaderboard.tables import STALE_MARK
from leakshield.leaderboard.text_section import text_tables
from leakshield.text_grid.cells import expand_text_grid
from leakshield.text_grid.config import parse_text_config
from leakshield.text_grid.runner import TextGridRunner
from leakshield.text_grid.stamps import TextStamper

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "leakshield"
ATTACKS = ["bag-of-words", {"name": "tag", "iterations": 5}, "dager", "sequence-imprint"]


def _stamps(config, graph: CodeGraph | None = None) -> dict[str, dict[str, str]]:
    stamper = TextStamper(config, graph)
    return {cell.key: stamper.stamps(cell) for cell in expand_text_grid(config)}


def _moved(before: dict, after: dict) -> set[tuple[str, str]]:
    """(attack label, kind) of every stamp that differs between two stampings of the same cells."""
    return {(key.split("attack=")[1].split("|")[0], kind)
            for key in before for kind in before[key] if before[key][kind] != after[key][kind]}  # fmt: skip


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, (path, old)
    path.write_text(text.replace(old, new))


def _every_attack(corpus: Path, attacks: list):
    """A grid of every text attack (DAGER needs two blocks, the imprint FedSGD), one victim batch."""
    return parse_text_config(tiny_config(
        corpus, states=["untrained"], victims={"count": 1, "batches": [1]}, attacks=attacks,
        update={"algorithm": "fedsgd"}, models=[{"name": "bert", "width": 16, "layers": 2, "heads": 2}],
    ))  # fmt: skip


def test_a_text_cells_stamps_follow_its_own_components_code_and_settings(tmp_path, rotten_tomatoes_csv):
    config = _every_attack(rotten_tomatoes_csv, ATTACKS)
    installed = _stamps(config)
    assert len(installed) == 2 * 4 and all(
        set(s) == {"core", "model", "defense", "attack"} for s in installed.values()
    )
    copy = tmp_path / "src" / "leakshield"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = _stamps(config, CodeGraph(copy))
    assert before == installed  # stamps hash contents, not where the package lies

    every = ("bag-of-words", "tag", "dager", "sequence-imprint")
    steps = [  # (file, (old, new) or None to append a line) → what must move, and nothing else
        ("text/imprint.py", None, {("sequence-imprint", "attack")}),
        # a parameter's new default lives in its attack's module: DAGER's cells move, TAG's do not
        ("text_grid/attacks/dager.py", ('default=True,\n        description="where fewer',
         'default=False,\n        description="where fewer'), {("dager", "attack")}),
        # DAGER's search: TAG reads a LoRA model's length through DAGER's token check, so it moves too
        ("text/dager.py", None, {("dager", "attack"), ("tag", "attack")}),
        ("text/scores.py", None, {(a, "core") for a in every}),  # the shared core: every cell
    ]  # fmt: skip
    for file, change, expected in steps:
        path = copy / file
        if change is None:
            path.write_text(path.read_text() + "\nUNUSED = 1\n")
        else:
            _edit(path, *change)
        after = _stamps(config, CodeGraph(copy))
        assert _moved(before, after) == expected, file
        before = after

    # settings: a parameter written out moves its attack's stamp; where the corpus lies and a full dump
    # of the config (a run directory's) move nothing; a batch size is an axis, not a setting
    changed = _every_attack(
        rotten_tomatoes_csv, [*ATTACKS[:2], {"name": "dager", "fill_in": False}, ATTACKS[3]]
    )
    assert _moved(installed, _stamps(changed)) == {("dager", "attack")}
    assert _stamps(parse_text_config(json.loads(json.dumps(config.model_dump(mode="json"))))) == installed
    moved = config.model_copy(
        update={"corpus": config.corpus.model_copy(update={"path": str(tmp_path / "x")})}
    )
    assert _stamps(moved) == installed
    more = parse_text_config({**config.model_dump(mode="json"), "victims": {"count": 1, "batches": [1, 2]}})
    assert {k: v for k, v in _stamps(more).items() if k in installed} == installed
    fewer = parse_text_config({**config.model_dump(mode="json"), "victims": {"count": 2, "batches": [1]}})
    assert {s["core"] for s in _stamps(fewer).values()} != {s["core"] for s in installed.values()}
    # a section that holds only what is popped (the corpus's path, the batch sizes) stamps as none: the
    # leaderboard runs its text section with --corpus, and --check reads the preset without it
    bare = {k: v for k, v in config.model_dump(mode="json", exclude_defaults=True).items()
            if k not in ("corpus", "victims")}  # fmt: skip
    given = parse_text_config(
        {**bare, "corpus": {"path": str(tmp_path / "c.csv")}, "victims": {"batches": [1, 2]}}
    )
    alone, with_path = _stamps(parse_text_config(bare)), _stamps(given)
    assert {key: with_path[key] for key in alone} == alone


@pytest.fixture
def small_grid(tmp_path, rotten_tomatoes_csv):
    return parse_text_config(tiny_config(
        rotten_tomatoes_csv, states=["untrained"], victims={"count": 1, "batches": [1]}, defenses=["none"],
    ))  # fmt: skip


def _set_environment(out: Path, key: str, change) -> None:
    with sqlite3.connect(out / "results.sqlite") as db:
        (stored,) = db.execute("SELECT environment FROM cells WHERE key = ?", (key,)).fetchone()
        db.execute(
            "UPDATE cells SET environment = ? WHERE key = ?", (json.dumps(change(json.loads(stored))), key)
        )


def test_a_text_rerun_recomputes_only_the_stale_cells(tmp_path, small_grid):
    out = tmp_path / "run"
    runner = TextGridRunner(small_grid, out, device="cpu", progress=False, cache_dir=tmp_path / "cache")
    first = runner.run()
    assert (first.computed, first.restamped) == (2, 0)
    stored = {r.key: r for r in ResultStore(out / "results.sqlite").records()}
    assert {k: r.environment["components"] for k, r in stored.items()} == _stamps(small_grid)
    tag, bag = sorted(stored, key=lambda k: "attack=tag" not in k)

    _set_environment(out, tag, lambda e: {**e, "components": {**e["components"], "attack": "0" * 16}})
    again = runner.run()
    assert (again.computed, again.restamped, again.skipped) == (1, 1, 1)
    now = {r.key: r for r in ResultStore(out / "results.sqlite").records()}
    assert now[bag].finished == stored[bag].finished and now[tag].finished > stored[tag].finished
    assert now[tag].environment["components"] == _stamps(small_grid)[tag]

    # a cell stored before stamps: fresh only from the source tree that judges it
    _set_environment(out, bag, lambda e: {k: v for k, v in e.items() if k != "components"})
    assert runner.run().computed == 0
    _set_environment(out, bag, lambda e: {**{k: v for k, v in e.items() if k != "components"}, "source": "x"})
    assert (lambda s: (s.computed, s.restamped))(runner.run()) == (1, 1)


def _group(defense: str, seed: int, attacks: tuple[str, ...] = ("tag", "sequence-imprint")) -> list:
    """Both states of one model, defense and seed, under each attack (each text cell as the text ranking
    reads it); the undefended cells leak every text."""
    scores = [[0.9, 1.0], [0.8, 0.95]] if defense == "none" else [[0.1, 0.0], [0.05, 0.2]]
    out = []
    for attack in attacks:
        for state in ("untrained", "trained"):
            record = _cell(
                defense, seed, state, scores, attack=attack, accuracy=0.8 if defense == "none" else 0.77
            )
            out.append(dataclasses.replace(record, key=f"{record.key}|{attack}"))
    return out


def _marked(tables) -> dict[str, set[str]]:
    return {t.title.split(" (")[0]: {row[1].removesuffix(STALE_MARK).split(" · ")[1]
            for row in t.rows if row[1].endswith(STALE_MARK)} for t in tables}  # fmt: skip


def test_the_text_tables_mark_the_rows_a_stale_cell_feeds():
    records = [r for seed in range(4) for d in ("none", "safe") for r in _group(d, seed)]
    keys = {(r.defense, r.seed, r.environment["state"], r.attack): r.key for r in records}
    observing, architecture = "Text · Honest-but-curious server", "Text · Malicious server"
    assert _marked(text_tables(records, ROUNDS)) == {observing: set(), architecture: set()}
    assert _marked(text_tables(records, ROUNDS, set())) == {observing: set(), architecture: set()}

    # a stale imprint cell marks its row under its own threat; its utility is vouched for by the fresh
    # TAG cell of the same trained model, so the honest server's table is untouched
    stale = {keys[("safe", 0, "trained", "sequence-imprint")]}
    assert _marked(text_tables(records, ROUNDS, stale)) == {observing: set(), architecture: {"safe"}}
    # the undefended model's accuracy is every row's reference
    stale = {keys[("none", 1, "trained", a)] for a in ("tag", "sequence-imprint")}
    both = {"none", "safe"}
    assert _marked(text_tables(records, ROUNDS, stale)) == {observing: both, architecture: both}
