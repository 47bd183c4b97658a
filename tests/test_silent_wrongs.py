"""Never a silent wrong: each case below once returned a wrong result with exit 0 and no warning (a hostile
user's probes); each is now refused in one line, or reported, and nothing it refuses is written."""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import math
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from leakshield.cli import main, quick_demo
from leakshield.cli_text import quick_text_demo
from leakshield.data.registry import load_dataset
from leakshield.errors import ConfigError
from leakshield.experiment.config import parse_config
from leakshield.experiment.store import CellRecord, ResultStore
from leakshield.experiment.yaml_files import parse_yaml
from leakshield.leaderboard.export_schema import numbers_digest
from leakshield.leaderboard.published import Protocol, check, rerender
from leakshield.leaderboard.readme_markers import README_END, README_START
from leakshield.report.tables import format_value

from helpers import tiny_config, write_config

ROOT = Path(__file__).resolve().parents[1]
EXPORT = ROOT / "docs" / "leaderboard" / "standard.json"
PUBLISHED = ROOT / "tests" / "data" / "leaderboard_published.yaml"


@functools.cache
def small_export() -> dict:
    """The published export cut to its main grid's rows of two defenses (seconds to render), with its
    digest written anew: a genuine export in the shape ``leakshield leaderboard`` writes."""
    data = json.loads(EXPORT.read_text())
    cells = [c for c in data["cells"] if c["defense"] in (None, "none", "dp-sgd")]
    small = {"run": {**data["run"], "cells": len(cells)}, "cells": cells, "scenarios": [],
             "provenance": data["provenance"]}  # fmt: skip
    return {**small, "digest": numbers_digest(small)}


def scratch(tmp_path: Path, data: dict | None = None) -> tuple[Path, Path]:
    """A README with a rendered Results block and its export, in ``tmp_path``."""
    (tmp_path / "docs" / "leaderboard").mkdir(parents=True)
    readme, export = tmp_path / "README.md", tmp_path / "docs" / "leaderboard" / "standard.json"
    readme.write_text("# project\n")
    export.write_text(json.dumps(data or small_export(), indent=0, sort_keys=True))
    rerender(readme, export, protocol=Protocol(PUBLISHED))
    return readme, export


def one_line(capsys: pytest.CaptureFixture, argv: list[str], code: int = 2) -> str:
    assert main(argv) == code
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("leakshield: error:") and "Traceback" not in err, err
    return err


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _set(path: list, value):
    def change(data: dict) -> None:
        target = data
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value

    return change


def _first_attack(data: dict) -> dict:
    return next(c for c in data["cells"] if c["kind"] == "attack" and c["status"] == "ok")


def _first_utility(data: dict) -> dict:
    return next(c for c in data["cells"] if c["kind"] == "utility")


def _stage_two(data: dict) -> None:
    data["stage2"] = [{"rerun": {}, "cells": []}]  # a rerun without its coordinates


def _scenarios_twice(data: dict) -> None:
    data["scenarios"] = [{"name": "batch", "title": "t", "ranked": True, "cells": []}] * 2


#: damage to a genuine export, as JSON, and what the refusal must name: the schema's cases get a
#: digest written anew after the damage, so that the schema alone must catch them
DAMAGES = {
    "main cells emptied": (lambda d: d.update(cells=[]), "damaged leaderboard export: cells:"),
    "NaN accuracy": (lambda d: _first_utility(d)["metrics"].update(accuracy=math.nan), "NaN where a number"),
    "infinite SSIM": (lambda d: _first_attack(d)["metrics"].update(ssim=math.inf), "metric 'ssim' is inf"),
    "string SSIM": (lambda d: _first_attack(d)["metrics"].update(ssim="0.9"), "metric 'ssim' is str"),
    "string victim SSIM": (lambda d: _first_attack(d)["victims"][0].update(ssim="high"), ".victims.0.ssim"),
    "duplicated cell": (lambda d: d["cells"].append(copy.deepcopy(_first_attack(d))), "times;"),
    "unknown status": (lambda d: _first_attack(d).update(status="running"), ".status:"),
    "no preset": (lambda d: d["run"].pop("preset"), "run.preset: Field required"),
    "no metrics": (lambda d: _first_attack(d).pop("metrics"), ".metrics: Field required"),
    "a bogus threat": (lambda d: _first_attack(d)["threat"].update(adversary="x"), "not a threat model"),
    "a rerun without coordinates": (_stage_two, "stage2.0.rerun.source: Field required"),
    "a scenario twice": (_scenarios_twice, "scenario 'batch' is written 2 times"),
    "no digest": (lambda d: d.pop("digest"), "digest: Field required"),
    "an edited number": (lambda d: _first_attack(d)["metrics"].update(ssim=0.001), "differ from the digest"),
    "a dropped cell": (lambda d: d["cells"].remove(_first_attack(d)), "differ from the digest"),
}
#: the damages only the digest can see (their schema holds)
DIGEST_ONLY = ("no digest", "an edited number", "a dropped cell")
#: damaged bytes (a file that is not an export at all)
BYTES = {
    "empty": b"",
    "truncated": None,  # the first half of the genuine export
    "binary": b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe",
    "a JSON list": b"[1, 2]",
    "null": b"null",
    "cells a mapping": b'{"run": {"preset": "standard", "name": "x", "cells": 1}, "cells": {"a": 1}}',
    "deeply nested": b"[" * 100_000 + b"]" * 100_000,
    "a repeated key": b'{"run": {"preset": "a", "preset": "b", "name": "x", "cells": 0}, "cells": []}',
}


@pytest.mark.parametrize("damage", [*DAMAGES, *BYTES])
def test_a_damaged_export_is_refused_in_one_line_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture, damage: str
) -> None:
    readme, export = scratch(tmp_path)
    text = export.read_text()
    if damage in DAMAGES:
        data = json.loads(text)
        change, named = DAMAGES[damage]
        change(data)
        if damage not in DIGEST_ONLY:
            data["digest"] = numbers_digest(data)  # the schema alone must refuse it
        export.write_text(json.dumps(data, indent=0, sort_keys=True))  # NaN/Infinity as Python writes them
    else:
        export.write_bytes(BYTES[damage] if BYTES[damage] is not None else text.encode()[: len(text) // 2])
        named = str(export)
    before = snapshot(tmp_path)
    config = ["--config", str(PUBLISHED)]
    err = one_line(capsys, ["leaderboard", "--from-export", str(export), "--readme", str(readme), *config])
    assert str(export) in err and named in err
    err = one_line(capsys, ["leaderboard", "--check", str(readme), *config])  # never "fresh"
    assert "standard.json" in err
    assert snapshot(tmp_path) == before


def test_the_digest_covers_the_numbers_not_a_migrations_stamps(tmp_path: Path) -> None:
    data = small_export()
    stamped = copy.deepcopy(data)
    stamped["cells"][0]["environment"] = {"components": {"core": "0" * 16}}  # a migration's stamps
    assert numbers_digest(stamped) == data["digest"]
    for part in ("metrics", "victims", "status", "seed"):
        edited = copy.deepcopy(data)
        cell = _first_attack(edited)
        cell[part] = {"metrics": {}, "victims": [], "status": "failed", "seed": 99}[part]
        assert numbers_digest(edited) != data["digest"], part
    readme, export = scratch(tmp_path)
    assert json.loads(export.read_text())["digest"] == data["digest"]
    verdict = check(readme, protocol=Protocol(PUBLISHED))
    assert verdict.faithful  # rendered from a verified export


@pytest.mark.parametrize(
    "markers",
    [
        "only the start marker",
        "the end marker first",
        "two blocks",
    ],
)
def test_broken_readme_markers_are_refused_and_the_readme_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture, markers: str
) -> None:
    readme, export = scratch(tmp_path)
    text = readme.read_text()
    block = text[text.index(README_START) : text.index(README_END) + len(README_END)]
    broken = {
        "only the start marker": text.replace(README_END, ""),
        "the end marker first": text.replace(block, README_END + "\nold\n" + README_START),
        "two blocks": text + "\n" + block + "\n",
    }[markers]
    readme.write_text(broken)
    page = tmp_path / "docs" / "leaderboard" / "standard.md"
    page.unlink()
    before = snapshot(tmp_path)
    config = ["--config", str(PUBLISHED)]
    err = one_line(capsys, ["leaderboard", "--from-export", str(export), "--readme", str(readme), *config])
    assert "markers are broken" in err
    assert snapshot(tmp_path) == before  # neither the README nor the results page written
    err = one_line(capsys, ["leaderboard", "--check", str(readme), *config])
    assert "markers are broken" in err


def test_a_duplicate_yaml_key_is_refused_with_its_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    text = yaml.safe_dump(tiny_config()) + "defenses: [gaussian-noise]\n"  # written twice: the first dropped
    config = write_config(tmp_path / "twice.yaml", text)
    err = one_line(capsys, ["run", str(config), "--out", str(tmp_path / "run"), "--dry-run"])
    assert "'defenses' appears twice" in err and "lines" in err
    assert not (tmp_path / "run").exists()
    nested = "presets:\n  quick:\n    seeds: 3\n    seeds: 5\n"
    with pytest.raises(ConfigError, match=r"'seeds' appears twice in one mapping \(lines 3 and 4\)"):
        parse_yaml(nested, "leaderboard.yaml")
    assert parse_yaml("a: &x {p: 1}\nb: {<<: *x, p: 2}\n", "merge") == {"a": {"p": 1}, "b": {"p": 2}}


def test_the_flat_and_nested_defense_forms_give_the_same_settings_everywhere() -> None:
    from leakshield.flower.leakage_filter import LeakageFilterMod

    flat = {"name": "gaussian-noise", "sigma": 0.5}
    nested = {"name": "gaussian-noise", "params": {"sigma": 0.5}}
    for entry in (flat, nested):
        (defense,) = LeakageFilterMod(trainer=None, defenses=[entry]).defenses
        assert defense.params.sigma == 0.5  # the flat form once ran σ 0.001 silently
        (setting,) = parse_config(tiny_config(defenses=[entry])).defenses
        assert setting.entries == [{"name": "gaussian-noise", "params": {"sigma": 0.5}}]
    with pytest.raises(ConfigError, match="both beside 'params' and inside it"):
        LeakageFilterMod(trainer=None, defenses=[{**flat, "params": {"sigma": 0.1}}])
    with pytest.raises(ConfigError, match="sgma: unknown field"):
        LeakageFilterMod(trainer=None, defenses=[{"name": "gaussian-noise", "sgma": 0.5}])


@pytest.mark.parametrize("text", [False, True])
def test_demo_quick_print_config_prints_the_config_quick_runs(
    capsys: pytest.CaptureFixture, text: bool
) -> None:
    flags = ["--text"] if text else []
    assert main(["demo", *flags, "--print-config"]) == 0
    full = parse_yaml(capsys.readouterr().out, "printed")
    assert main(["demo", *flags, "--quick", "--print-config"]) == 0
    quick = parse_yaml(capsys.readouterr().out, "printed")
    assert quick == (quick_text_demo if text else quick_demo)(full) and quick != full
    assert quick["name"].endswith("-quick")


def test_one_class_data_is_refused_with_chance_stated(tmp_path: Path) -> None:
    images = np.random.default_rng(0).integers(0, 255, (60, 8, 8, 3), dtype=np.uint8)
    np.savez(tmp_path / "one.npz", images=images, labels=np.full(60, 3))
    params = {"file": "one.npz", "classes": "cifar10", "channels": 3, "size": 8}
    with pytest.raises(ConfigError, match=r"class 3 \('cat'\).*accuracy 1\.000"):
        load_dataset("npz", params, root=tmp_path)
    np.savez(tmp_path / "two.npz", images=images, labels=np.arange(60) % 2)
    load_dataset("npz", {**params, "file": "two.npz"}, root=tmp_path)  # two classes: read


def test_a_one_class_corpus_is_refused(tmp_path: Path) -> None:
    from leakshield.text.corpus import TextCorpus
    from leakshield.text.dataset import load_text_data

    texts = tuple(f"review {i} of movie {i % 20} was good" for i in range(200))
    groups = tuple(f"movie {i % 20}" for i in range(200))
    one = TextCorpus("rotten-tomatoes", texts, (1,) * 200, groups, ("rotten", "fresh"))
    with pytest.raises(ConfigError, match=r"class 1 \('fresh'\).*accuracy 1\.000"):
        load_text_data(one, vocab_size=200)
    labels = tuple(i // 20 % 2 for i in range(200))  # each movie holds both classes
    two = TextCorpus("rotten-tomatoes", texts, labels, groups, ("rotten", "fresh"))
    assert load_text_data(two, vocab_size=200).info.num_classes == 2


def test_dp_without_noise_reports_an_infinite_epsilon(tmp_path: Path) -> None:
    config = tiny_config(
        defenses=[{"name": "dp-sgd", "noise_multiplier": 0}, {"name": "dp-fedavg", "noise_multiplier": 0}],
        attacks=[{"name": "ig", "iterations": 2}],
        victims={"count": 1, "batch_size": 1, "seed": 0},
        report={"values": ["ssim", "epsilon"]},
    )
    out = tmp_path / "run"
    assert main(["run", str(write_config(tmp_path / "c.yaml", config)), "--out", str(out), "--quiet"]) == 0
    utility = {
        r.defense: r.metrics for r in ResultStore(out / "results.sqlite").records() if r.kind == "utility"
    }
    assert utility["dp-sgd"]["epsilon"] == math.inf and utility["dp-fedavg"]["epsilon_client"] == math.inf
    assert "| ∞ |" in (out / "table.md").read_text()  # not "n/a": no privacy, not "not measured"
    from leakshield.leaderboard.tables import epsilon_number

    assert epsilon_number(math.inf) == "∞" and format_value("epsilon", [math.inf]) == "∞"


def _tiny_run(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    config = tiny_config(
        attacks=[{"name": "ig", "iterations": 2}], victims={"count": 1, "batch_size": 1, "seed": 0}
    )
    assert main(["run", str(write_config(tmp_path / "c.yaml", config)), "--out", str(out), "--quiet"]) == 0
    return out


def test_report_refuses_a_foreign_sqlite_file_without_writing_to_it(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = _tiny_run(tmp_path)
    store = out / "results.sqlite"
    store.unlink()
    with sqlite3.connect(store) as db:
        db.execute("CREATE TABLE users (name TEXT, email TEXT)")
        db.execute("INSERT INTO users VALUES ('ada', 'ada@example.org')")
    db.close()
    digest = hashlib.sha256(store.read_bytes()).hexdigest()
    err = one_line(capsys, ["report", str(out)])
    assert "not a leakshield result store" in err and "users" in err
    assert hashlib.sha256(store.read_bytes()).hexdigest() == digest  # no leakshield table added
    err = one_line(capsys, ["run", str(tmp_path / "c.yaml"), "--out", str(out)])
    assert "not a leakshield result store" in err


def test_report_counts_the_rows_its_means_leave_out(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = _tiny_run(tmp_path)
    store = ResultStore(out / "results.sqlite")
    attack = next(r for r in store.records() if r.kind == "attack")
    for suffix, change in (
        ("a", {"status": "running"}),
        ("b", {"metrics": {**attack.metrics, "ssim": "high"}}),
    ):
        fields = {**attack.__dict__, "key": attack.key + suffix, "seed": 7, **change}
        store.put(CellRecord(**fields))
    assert main(["report", str(out)]) == 0
    table = (out / "table.md").read_text()
    assert "Left out of the means: 1 with an unknown status ('running'" in table
    assert "1 whose metric(s) ssim are not numbers" in table
    assert "Left out of the means" in (out / "report.html").read_text()
    capsys.readouterr()


def test_left_out_rows_are_not_counted_when_there_are_none(tmp_path: Path) -> None:
    from leakshield.report.tables import left_out

    out = _tiny_run(tmp_path)
    assert left_out(ResultStore(out / "results.sqlite").records()) is None
    assert "Left out" not in (out / "table.md").read_text()


def test_a_one_class_split_check_leaves_two_class_tensors_alone() -> None:
    from leakshield.data.registry import refuse_one_class

    refuse_one_class("x", "test", torch.tensor([0, 1, 1]))
    refuse_one_class("x", "test", torch.tensor([], dtype=torch.long))  # empty: said elsewhere
    with pytest.raises(ConfigError, match="every one of the 3 test examples is class 1"):
        refuse_one_class("x", "test", torch.tensor([1, 1, 1]))


def test_a_readme_that_is_not_text_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    readme, export = scratch(tmp_path)
    readme.write_bytes(b"# project\n\xff\xfe" + readme.read_bytes())
    before = snapshot(tmp_path)
    config = ["--config", str(PUBLISHED)]
    err = one_line(capsys, ["leaderboard", "--from-export", str(export), "--readme", str(readme), *config])
    assert "not UTF-8 text" in err
    assert "not UTF-8 text" in one_line(capsys, ["leaderboard", "--check", str(readme), *config])
    assert snapshot(tmp_path) == before


def test_the_nested_form_is_read_where_presets_and_text_grids_take_components() -> None:
    from leakshield.leaderboard.presets import _with_params
    from leakshield.registry import component_entry

    merged = _with_params([{"name": "ig", "params": {"iterations": 5}}], {"ig": {"iterations": 9}})
    assert merged == [{"name": "ig", "iterations": 9}]  # the preset's params override, as for the flat form
    assert component_entry({"name": "tag", "params": None}) == {"name": "tag"}
    with pytest.raises(ValueError, match="params: a mapping"):
        component_entry({"name": "tag", "params": [1]})
    assert quick_demo({"name": "d", "victims": {}, "utility": {}, "attacks": [{"name": "ig", "params": {}}]})[
        "attacks"
    ] == [{"name": "ig", "iterations": 100}]


def test_a_one_class_train_split_with_a_two_class_test_split_is_read(tmp_path: Path) -> None:
    from leakshield.data.registry import refuse_one_class

    refuse_one_class("x", "test", torch.tensor([4]))  # one example: no claim on accuracy either way
    images = np.random.default_rng(0).integers(0, 255, (40, 8, 8, 1), dtype=np.uint8)
    np.savez(tmp_path / "a.npz", images=images, labels=np.arange(40) % 2)
    load_dataset("npz", {"file": "a.npz", "channels": 1, "size": 8, "max_train": 1}, root=tmp_path)
