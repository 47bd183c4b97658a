"""Provenance per component: each cell's stamps (the content of the modules its components reach, and
their settings), the published Results judged row by row against the installed code, the block compared
line by line with its export, and a rerun that recomputes only the stale cells.

Each scenario of the acceptance is played on a scratch copy of the package (its import graph read from
the copy; the moved-module case imports the copy in a subprocess, registries and all). Under the old
rule, one hash of every computing file over relative paths, each of these scenarios read "stale"; the
tests assert that too, so they show where the two rules part."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from leakshield.artifacts import ArtifactCache
from leakshield.code_graph import CodeGraph, installed_graph, normalized_source
from leakshield.errors import ConfigError
from leakshield.experiment.cells import expand_grid
from leakshield.experiment.config import parse_config
from leakshield.experiment.runner import ExperimentRunner
from leakshield.experiment.stamps import ComponentCode, Stamper, module_changes
from leakshield.leaderboard.export import STAGE_TWO_PREFIX, STALE_MARK, readme_block, stage_two_name
from leakshield.leaderboard.presets import leaderboard_data, load_leaderboard, load_scenarios
from leakshield.leaderboard.published import Protocol, check, judge_export, rerender, stamp_export
from leakshield.leaderboard.staleness import TEXT_SCOPE
from leakshield.provenance import tree_hash

from helpers import tiny_config

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "leakshield"
EXPORT = ROOT / "docs" / "leaderboard" / "standard.json"
#: the leaderboard file the published export was computed with (the shipped one): the scenarios below
#: judge that export against it, so that what they find is their edit's doing, not the protocol's
PUBLISHED = Protocol(ROOT / "tests" / "data" / "leaderboard_published.yaml")


def scratch_package(tmp_path: Path) -> Path:
    """A copy of the package (what an edit in a clone would start from)."""
    copy = tmp_path / "src" / "leakshield"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


@functools.cache
def fresh_export() -> str:
    """The published export's cells stamped by the installed code: the scenarios below edit a scratch
    copy of the package and judge against it, so that what they find is their edit's doing alone,
    whatever the published Results already mark stale."""
    data = json.loads(EXPORT.read_text())
    main, scenarios = PUBLISHED.configs(data["run"]["preset"])
    text = PUBLISHED.text(data["run"]["preset"])
    return json.dumps(stamp_export(data, main, scenarios, text=text), indent=0, sort_keys=True)


def scratch_repo(tmp_path: Path) -> Path:
    """A README whose Results block is rendered from :func:`fresh_export`, and that export."""
    (tmp_path / "docs" / "leaderboard").mkdir(parents=True)
    shutil.copyfile(ROOT / "README.md", tmp_path / "README.md")
    export = tmp_path / "docs" / "leaderboard" / "standard.json"
    export.write_text(fresh_export())
    rerender(tmp_path / "README.md", export, protocol=PUBLISHED)
    return tmp_path


def published_source() -> str:
    return json.loads(EXPORT.read_text())["run"]["source"]


def marked_rows(block: str) -> set[str]:
    """The ``model · defense`` labels the block marks stale."""
    return set(re.findall(r"\| ([^|]+ · [^|]+?)" + re.escape(STALE_MARK) + r" \|", block))


def test_a_modules_hash_ignores_comments_docstrings_blank_lines_and_package_imports() -> None:
    code = "import torch\nfrom leakshield.gradients import flat\n\n\ndef f(x):\n    return torch.sin(x)\n"
    same = ('"""A module."""\nimport torch\nfrom leakshield.fl.gradients import (\n    flat,\n)\n\n'
            'def f(x):  # the sine\n    """Sine."""\n\n    return torch.sin(x)\n')  # fmt: skip
    assert normalized_source(code) == normalized_source(same)
    assert normalized_source(code) != normalized_source(code.replace("sin", "cos"))
    assert normalized_source(code) != normalized_source(code.replace("import torch", "import numpy"))


def test_a_modules_hash_ignores_the_order_of_a_run_of_package_imports_not_their_scope() -> None:
    """A move rewrites import paths and an import sorter then reorders them within their run
    (``attacks.base`` before ``attacks.passive``, in a function too): the module computes the same, its
    hash is the same. An import moved past code, or into another function, may compute otherwise."""
    code = "\n".join([
        "import torch",
        "from leakshield.attacks.passive.labels import infer",
        "from leakshield.attacks.base import ATTACKS",
        "def f(x):",
        "    from leakshield.metrics import ssim",
        "    from leakshield.fl.gradients import flat",
        "    return ssim(infer(flat(x)))",
    ])  # fmt: skip
    moved = "\n".join([
        "import torch",
        "from leakshield.attacks.base import ATTACKS",
        "from leakshield.passive.labels import infer",
        "def f(x):",
        "    from leakshield.gradients import flat",
        "    from leakshield.metrics import ssim",
        "    return ssim(infer(flat(x)))",
    ])  # fmt: skip
    assert normalized_source(code) == normalized_source(moved)
    other = normalized_source(moved.replace("import ssim", "import psnr as ssim"))
    assert normalized_source(code) != other
    assert normalized_source(code) != normalized_source(moved.replace("import torch", "import np as torch"))
    shadowed = "from leakshield.a import f\ndef f():\n    return 1\n"
    assert normalized_source(shadowed) != normalized_source(
        "def f():\n    return 1\nfrom leakshield.a import f\n"
    )
    lazy = "def g():\n    from leakshield.a import s\n    return s\ndef h():\n    return s\n"
    assert normalized_source(lazy) != normalized_source(
        "def g():\n    return s\ndef h():\n    from leakshield.a import s\n    return s\n"
    )


def test_an_imports_bindings_count_and_a_package_inits_own_code_is_reached(tmp_path: Path) -> None:
    """Swapping the names an import binds changes a module's hash; code in a package ``__init__`` runs
    when any of its submodules is imported, so it is in their closure; its imports and ``__all__`` are
    not (registering a submodule or re-exporting a name changes nothing)."""
    plain = "from leakshield.metrics.image import psnr, ssim\n"
    swapped = "from leakshield.metrics.image import ssim as psnr, psnr as ssim\n"
    assert normalized_source(plain) != normalized_source(swapped)
    init = "from leakshield.zoo import cat\nfrom leakshield.zoo.cat import Cat\n__all__ = ['Cat']\n"
    assert normalized_source(init, package=True) == normalized_source(
        init.replace("cat\n", "cat, dog\n", 1), True
    )
    for name, text in {"__init__.py": "", "zoo/__init__.py": init, "zoo/cat.py": "class Cat: ...\n"}.items():
        (tmp_path / "leakshield" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "leakshield" / name).write_text(text)
    before = CodeGraph(tmp_path / "leakshield").closure(["leakshield.zoo.cat"])
    assert set(before) == {"leakshield.zoo.cat"}  # the zoo's __init__: imports only, nothing to hash
    (tmp_path / "leakshield" / "zoo" / "__init__.py").write_text(
        init + "import torch\ntorch.set_default_dtype(torch.float64)\n"
    )
    assert CodeGraph(tmp_path / "leakshield").closure(["leakshield.zoo.cat"]) != before


def test_the_graph_resolves_re_exports_and_skips_a_packages_registering_imports(tmp_path: Path) -> None:
    """A registry's package ``__init__`` imports every submodule to register it: reaching the package
    must not reach them, while a name it re-exports resolves to the module defining it."""
    files = {
        "__init__.py": "",
        "base.py": "REGISTRY = {}\n",
        "zoo/__init__.py": "from leakshield.zoo import bird, cat, dog  # noqa\n"
        "from leakshield.zoo.cat import Cat\nfrom leakshield.zoo.dog import Dog\n",
        "zoo/cat.py": "from leakshield.base import REGISTRY\nclass Cat: ...\n",
        "zoo/dog.py": "class Dog: ...\n",
        "zoo/bird.py": "class Bird: ...\n",
        "user.py": "from leakshield.zoo import Cat\n",
        "whole.py": "import leakshield.zoo\n",
        "other.py": "from leakshield.zoo import dog\n",
    }
    for name, text in files.items():
        (tmp_path / "leakshield" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "leakshield" / name).write_text(text)
    graph = CodeGraph(tmp_path / "leakshield")
    assert set(graph.closure(["leakshield.user"])) == {
        "leakshield.user",
        "leakshield.zoo.cat",
        "leakshield.base",
    }
    whole = {
        "leakshield.whole",
        "leakshield.zoo.cat",
        "leakshield.zoo.dog",
        "leakshield.base",
    }
    assert set(graph.closure(["leakshield.whole"])) == whole
    assert set(graph.closure(["leakshield.other"])) == {"leakshield.other", "leakshield.zoo.dog"}


def test_an_attacks_closure_reaches_its_engine_but_not_the_other_attacks() -> None:
    graph = installed_graph()
    ig = graph.closure(["leakshield.attacks.passive.inversion.presets"])
    assert "leakshield.attacks.passive.inversion.engine" in ig and "leakshield.registry" in ig
    assert "leakshield.attacks.active.imprint" not in ig and "leakshield.defenses.noise" not in ig
    core = graph.closure(["leakshield.experiment.compute"])
    assert "leakshield.experiment.pipeline" in core and "leakshield.metrics.image" in core
    assert not any(
        m.startswith(("leakshield.attacks.passive.inversion", "leakshield.defenses.noise")) for m in core
    )
    assert "leakshield.provenance" not in core  # it records, it does not compute


def test_registering_a_new_attack_stales_nothing(tmp_path: Path) -> None:
    package = scratch_package(tmp_path)
    (package / "attacks" / "dummy.py").write_text(
        "from leakshield.attacks.base import ATTACKS\nfrom leakshield.threats import OBSERVER\n\n\n"
        '@ATTACKS.register("dummy", summary="nothing", threat=OBSERVER)\nclass Dummy:\n    pass\n'
    )
    init = package / "attacks" / "__init__.py"
    init.write_text(init.read_text().replace("    active,\n", "    active,\n    dummy,\n"))
    assert "dummy" in init.read_text()
    staleness = judge_export(fresh_export(), CodeGraph(package), PUBLISHED)
    assert staleness.cells == 1942 + 932 + 1056 + 336 and not staleness.stale  # stage 2 and text judged too
    assert tree_hash(package) != published_source()  # the old rule: every row stale


def test_editing_the_noise_defense_stales_exactly_its_rows_and_the_rerendered_block_says_so(
    tmp_path: Path,
) -> None:
    package = scratch_package(tmp_path)
    noise = package / "defenses" / "noise.py"
    noise.write_text(noise.read_text() + "\n\ndef _unused_helper():\n    return 1\n")
    graph = CodeGraph(package)
    staleness = judge_export(fresh_export(), graph, PUBLISHED)
    assert staleness.changes == [  # DP-FedAvg draws its noise through noise.py
        "leakshield.defenses.noise edited (defense dp-fedavg-local, defense dp-fedavg, "
        "defense gaussian-noise, defense gaussian-noise@sigma=0.01, defense gaussian-noise@sigma=0.1, "
        "defense gaussian-noise@sigma=1, defense laplacian-noise, defense noise-1, defense noise-1e-1, "
        "defense noise-1e-2)"
    ]
    data = json.loads(fresh_export())
    cells = [(None, c) for c in data["cells"]] + [
        (s["name"], c) for s in data["scenarios"] for c in s["cells"]
    ]
    cells += [(TEXT_SCOPE, c) for c in data["text"]["cells"]]  # the text grid noises its updates too
    cells += [(STAGE_TWO_PREFIX + stage_two_name(e["rerun"]), c) for e in data["stage2"] for c in e["cells"]]
    # the noise defenses, their rungs (``@``) and the learning attackers' noise rows (``noise-1e-2``, …)
    noisy_defenses = ("gaussian-noise", "laplacian-noise", "dp-fedavg", "dp-fedavg-local")
    labels = {(scope, c["key"]): c["defense"] or "" for scope, c in cells}
    noisy = {k for k, label in labels.items()
             if label.split("@")[0] in noisy_defenses or label.startswith("noise-")}
    # main grid 549, scenarios 225, stage 2's noise reruns 128, text 96
    assert set(staleness.stale) == noisy and len(noisy) == 549 + 225 + 128 + 96
    repo = scratch_repo(tmp_path / "repo")
    readme = repo / "README.md"
    rerender(readme, repo / "docs" / "leaderboard" / "standard.json", graph, PUBLISHED)
    block = readme_block(readme.read_text())
    page = repo / "docs" / "leaderboard" / "standard.md"
    noise_rows = {
        "lenet-tanh · gaussian-noise",
        "lenet-tanh · gaussian-noise@sigma=0.01",
        "lenet-tanh · gaussian-noise@sigma=0.1",
        "lenet-tanh · gaussian-noise@sigma=1",
        "lenet-tanh · noise-1e-2",  # the learning attackers' scenario labels its noise rows so
        "lenet-tanh · noise-1e-1",
        "lenet-tanh · noise-1",
        "lenet-tanh · laplacian-noise",
        "lenet-tanh · dp-fedavg",
        "lenet-tanh · dp-fedavg-local",
        "resnet18-w16 · gaussian-noise",
        "smlp · gaussian-noise",
        "bert · gaussian-noise",
        "bert · laplacian-noise",
    }
    assert marked_rows(page.read_text()) == noise_rows  # every table is on the results page
    assert marked_rows(block) <= noise_rows and marked_rows(block)  # the README shows its top rows
    assert "**Stale: 29 of 107 rows**" in block and "leakshield.defenses.noise edited" in block
    verdict = check(readme, graph, PUBLISHED)
    assert verdict.faithful and not verdict.fresh  # the block says what is stale: the suite stays green
    assert any("29 of 107 rows" in line for line in verdict.lines)

    marked = page.read_text()
    page.write_text(marked.replace(STALE_MARK, ""))  # a page claiming a freshness it does not have
    assert not check(readme, graph, PUBLISHED).faithful
    page.write_text(marked)
    assert check(readme, graph, PUBLISHED).faithful
    readme.write_text(readme.read_text().replace(STALE_MARK, ""))  # and the README's block
    assert not check(readme, graph, PUBLISHED).faithful


def test_moving_a_core_module_stales_nothing(tmp_path: Path) -> None:
    package = scratch_package(tmp_path)
    (package / "gradients.py").rename(package / "fl" / "gradients.py")
    for path in package.rglob("*.py"):
        text = path.read_text()
        if "leakshield.gradients" in text:
            path.write_text(text.replace("leakshield.gradients", "leakshield.fl.gradients"))
    graph = CodeGraph(package)
    assert "leakshield.fl.gradients" in graph.closure(["leakshield.experiment.compute"])
    assert not judge_export(fresh_export(), graph, PUBLISHED).stale
    assert tree_hash(package) != published_source()  # the old rule: every row stale


def test_git_mv_of_a_defense_module_stales_nothing_as_the_cli_sees_it(tmp_path: Path) -> None:
    """The noise defense moved to ``defenses/perturbation/noise.py``, its imports rewritten; the copy is
    imported in a subprocess, so the registry finds the defense where it now lives."""
    package = scratch_package(tmp_path)
    (package / "defenses" / "perturbation").mkdir()
    (package / "defenses" / "perturbation" / "__init__.py").write_text('"""Perturbing defenses."""\n')
    (package / "defenses" / "noise.py").rename(package / "defenses" / "perturbation" / "noise.py")
    for path in package.rglob("*.py"):
        text = path.read_text().replace("leakshield.defenses.noise", "leakshield.defenses.perturbation.noise")
        path.write_text(text)
    init = package / "defenses" / "__init__.py"
    init.write_text(
        init.read_text().replace("    noise,\n", "")
        + "from leakshield.defenses.perturbation import noise  # noqa\n"
    )
    repo = scratch_repo(tmp_path / "repo")
    env = {**os.environ, "PYTHONPATH": str(package.parent)}
    probe = [
        sys.executable,
        "-c",
        "import leakshield.defenses as d; print(d.DEFENSES.get('gaussian-noise').factory.__module__)",
    ]
    moved = subprocess.run(probe, env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert moved == "leakshield.defenses.perturbation.noise"
    check_it = ["leaderboard", "--check", "README.md", "--config", str(PUBLISHED.path)]
    done = subprocess.run([sys.executable, "-m", "leakshield", *check_it],
                          cwd=repo, env=env, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("fresh")
    assert tree_hash(package) != published_source()  # the old rule: every row stale


def test_an_edited_number_in_the_block_is_reported(tmp_path: Path) -> None:
    repo = scratch_repo(tmp_path)
    readme = repo / "README.md"
    row = ("| 1 · a | lenet-tanh · dp-sgd@noise_multiplier=2 | ggl-adaptive@2 · best of 8 · "
           "stage 2: 128 victims, 8 seeds | 0.064")
    assert row in readme.read_text()
    readme.write_text(readme.read_text().replace(row, row.replace("| 0.064", "| 0.046")))
    verdict = check(readme, None, PUBLISHED)
    assert not verdict.faithful and not verdict.staleness.stale  # the cells are fresh; the block is not
    assert verdict.lines[0].startswith("differs")
    assert "0.046" in verdict.lines[1] and "0.064" in verdict.lines[1]


def test_the_published_results_mark_exactly_their_stale_rows() -> None:
    """The README's Results block must be what its export renders with this code: every number, and a
    "(stale)" mark on exactly the rows this code would compute differently. After an edit to a
    component, rerender it (seconds): ``leakshield leaderboard --from-export
    docs/leaderboard/standard.json --readme README.md``; a release reruns the preset."""
    verdict = check(ROOT / "README.md")
    assert verdict.faithful, "\n".join(verdict.lines)


#: the last commit whose published export was stamped by the migration (0.2.0's cells), not computed
MIGRATED = "853a17ad8a8b789d9aae806da2fe0e5e8289b902"


def _git(*args: str) -> bytes:
    """``git args`` in this checkout; a commit missing from its history skips (fails on CI's clone)."""
    try:
        return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError):
        if os.environ.get("CI"):
            pytest.fail(f"git {' '.join(args)}: not in this clone's history")
        pytest.skip(f"git {' '.join(args)}: not in this checkout's history")


def test_the_published_export_was_stamped_from_the_tree_that_computed_it(tmp_path: Path) -> None:
    """The migration stamped the published cells from the commit whose package hashes (old rule) to
    the export's source tree: every module of every stamped component has that commit's content, every
    stamp is its component's, and apart from the stamps the export is that commit's, byte for byte."""
    text = EXPORT.read_text()
    if "stamped" not in json.loads(text)["run"]:  # a run of its own: the last export the migration stamped
        text = _git("show", f"{MIGRATED}:docs/leaderboard/standard.json").decode()
    data = json.loads(text)
    commit, source = data["run"]["stamped"]["commit"], data["run"]["source"]
    archive = _git("archive", commit, "src/leakshield")
    original = _git("show", f"{commit}:docs/leaderboard/standard.json")
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive, check=True)
    old = tmp_path / "src" / "leakshield"
    assert tree_hash(old) == source == "96525dfda5f65d0d"
    graph = CodeGraph(old)
    for stamp, component in data["provenance"].items():
        assert component["modules"] == {m: graph.modules[m].digest for m in component["modules"]}
        rebuilt = ComponentCode(
            component["kind"], component["name"], component["modules"], component["settings"]
        )
        assert rebuilt.stamp == stamp
    every = data["cells"] + [c for s in data["scenarios"] for c in s["cells"]]
    assert all(set(c["environment"]["components"].values()) <= set(data["provenance"]) for c in every)
    # stamping again from that commit (its leaderboard file, the installed stamper finding each moved
    # module at its old path) gives the stamps stored
    shipped = old / "configs" / "leaderboard.yaml"
    main = load_leaderboard(data["run"]["preset"], path=shipped)
    scenarios = {name: c for name, c, _ in load_scenarios(data["run"]["preset"], path=shipped)}
    again = stamp_export(json.loads(text), main, scenarios, graph)
    assert again["provenance"] == data["provenance"]
    for cell in every:
        del cell["environment"]["components"]
    del data["provenance"], data["run"]["stamped"]
    assert json.dumps(data, indent=0, sort_keys=True).encode() == original


def _tiny_runner(tmp_path: Path) -> ExperimentRunner:
    defenses = ["none", {"name": "gaussian-noise", "sigma": 0.01}]
    attacks = [{"name": "idlg", "iterations": 2}]
    config = parse_config(tiny_config(attacks=attacks, utility={"rounds": 0}, defenses=defenses))
    return ExperimentRunner(config, tmp_path / "run", device="cpu", progress=False)


def test_a_rerun_recomputes_only_the_stale_cells(tmp_path: Path) -> None:
    runner = _tiny_runner(tmp_path)
    first = runner.run()
    assert first.failed == 0 and first.computed == len(runner.cells()) and first.restamped == 0
    cells = {c.key: c for c in runner.cells()}
    noisy = [k for k, c in cells.items() if c.defense is not None and c.defense.display == "gaussian-noise"]
    with sqlite3.connect(runner.out / "results.sqlite") as db:  # as if computed by another noise defense
        for key in noisy:
            (env,) = db.execute("SELECT environment FROM cells WHERE key = ?", (key,)).fetchone()
            stored = json.loads(env)
            stored["components"]["defense"] = "0" * 16
            db.execute("UPDATE cells SET environment = ? WHERE key = ?", (json.dumps(stored), key))
    from leakshield.experiment.estimate import cells_to_compute

    assert {c.key for c in cells_to_compute(runner)} == set(noisy)  # the dry run counts them too
    again = runner.run()
    assert again.restamped == len(noisy) > 0 and again.computed == len(noisy)
    assert again.skipped == len(cells) - len(noisy)
    assert runner.run().computed == 0  # restamped: nothing left to do
    from leakshield.provenance import source_hash

    first_key, second_key = sorted(cells)[:2]
    with sqlite3.connect(runner.out / "results.sqlite") as db:  # stored before stamps existed
        for key, source in ((first_key, source_hash()), (second_key, "0" * 16)):
            (env,) = db.execute("SELECT environment FROM cells WHERE key = ?", (key,)).fetchone()
            stored = {k: v for k, v in json.loads(env).items() if k != "components"} | {"source": source}
            db.execute("UPDATE cells SET environment = ? WHERE key = ?", (json.dumps(stored), key))
    assert runner.run().restamped == 1  # only the cell another source tree computed


def test_a_components_stamp_follows_its_settings_and_its_code() -> None:
    config = parse_config(tiny_config(defenses=[{"name": "gaussian-noise", "sigma": 0.01}]))
    louder = parse_config(tiny_config(defenses=[{"name": "gaussian-noise", "sigma": 0.1}]))
    cell = next(c for c in expand_grid(config) if c.kind == "attack")
    other = next(c for c in expand_grid(louder) if c.kind == "attack")
    mine, theirs = Stamper(config).stamps(cell), Stamper(louder).stamps(other)
    assert mine["defense"] != theirs["defense"]
    assert {k: v for k, v in mine.items() if k != "defense"} == {
        k: v for k, v in theirs.items() if k != "defense"
    }
    assert module_changes({"a": "1", "b": "2"}, {"a": "1", "c": "2"}) == []  # b moved to c
    assert module_changes({"a": "1"}, {"a": "3", "d": "4"}) == ["a edited", "d added"]


def test_an_axis_alone_in_a_section_is_no_setting() -> None:
    """``attack: {rounds: [...]}`` names only the rounds axis: its cells compute what a config without the
    section computes, so the core stamps agree; a real attack setting still changes the core."""
    bare = {k: v for k, v in tiny_config().items() if k != "attack"}
    plain = parse_config(bare)
    rounds = parse_config({**bare, "attack": {"rounds": [0, 2]}})
    tuned = parse_config({**bare, "attack": {"rounds": [0, 2], "model_mode": "train"}})
    core = lambda config: Stamper(config).stamps(  # noqa: E731
        next(c for c in expand_grid(config) if c.kind == "attack" and c.round == 0)
    )["core"]
    assert core(rounds) == core(plain) != core(tuned)


@pytest.mark.parametrize(
    ("section", "name", "hint"), [("params", "igg", "did you mean 'ig'?"), ("training", "nosuchdef", "")]
)
def test_unknown_names_under_a_presets_params_or_training_are_refused(
    section: str, name: str, hint: str
) -> None:
    document = {"base": {"models": ["lenet"], "attacks": ["ig"]},
                "presets": {"p": {"params": {"ig": {"iterations": 5}}}}}  # fmt: skip
    if section == "params":
        document["presets"]["p"]["params"][name] = {"iterations": 5}
    else:
        document["training"] = {"none": {"local_lr": 0.1}, name: {"local_lr": 0.1}}
    with pytest.raises(ConfigError, match=re.escape(f"unknown name {name!r}")) as raised:
        leaderboard_data(document, "p")
    assert hint in str(raised.value) and "gaussian-noise" in str(raised.value)  # the allowed names


def test_an_attack_run_under_one_threat_stales_only_that_threats_rows(tmp_path: Path) -> None:
    """imprint runs only as a malicious server: editing it marks rows of the malicious-server tables and
    none of the honest-but-curious or malicious-client tables (rows are judged per table)."""
    package = scratch_package(tmp_path)
    imprint = package / "attacks" / "active" / "imprint.py"
    imprint.write_text(imprint.read_text() + "\n\nUNUSED = 1\n")
    repo = scratch_repo(tmp_path / "repo")
    export = repo / "docs" / "leaderboard" / "standard.json"
    rerender(repo / "README.md", export, CodeGraph(package), PUBLISHED)
    page = (repo / "docs" / "leaderboard" / "standard.md").read_text()
    sections = {part.split("\n", 1)[0]: part for part in page.split("\n### ")[1:]}
    marked = {title: marked_rows(text) for title, text in sections.items()}
    mine = lambda title: title.startswith("Malicious server") or ": malicious server" in title  # noqa: E731
    assert all(rows for title, rows in marked.items() if mine(title))
    assert not any(rows for title, rows in marked.items() if not mine(title))


def test_cells_stored_before_stamps_are_fresh_only_from_the_same_source_tree(tmp_path: Path) -> None:
    data = json.loads(fresh_export())
    for cell in data["cells"][:5]:
        del cell["environment"]["components"]
        cell["environment"]["source"] = "0123456789abcdef"  # computed by another tree than this one
    stripped = json.dumps(data)
    assert len(judge_export(stripped, protocol=PUBLISHED).stale) == 5
    graph = CodeGraph(PACKAGE)
    for cell in data["cells"][:5]:
        cell["environment"]["source"] = tree_hash(graph.root)
    assert not judge_export(json.dumps(data), graph, PUBLISHED).stale


def test_a_fitted_artifact_is_keyed_by_the_code_that_fits_it(tmp_path: Path) -> None:
    from leakshield.artifacts import Artifact, FitKey
    from leakshield.experiment.code_cache import CodeKeyedCache, fit_code

    key = FitKey("defense:loda", {"steps": 1}, "public", "data", 0)
    cache = CodeKeyedCache(tmp_path / "cache")
    cache.save(key, Artifact({"w": torch.ones(2)}, {}))
    assert cache.load(key) is not None and ArtifactCache(tmp_path / "cache").load(key) is None
    package = scratch_package(tmp_path)
    assert fit_code("defense:loda", CodeGraph(package)) == fit_code("defense:loda")
    extractor = package / "defenses" / "loda" / "extractor.py"
    extractor.write_text(extractor.read_text() + "\nUNUSED = 1\n")
    assert fit_code("defense:loda", CodeGraph(package)) != fit_code("defense:loda")
    assert fit_code("defense:dm", CodeGraph(package)) == fit_code("defense:dm")  # another defense's fit


def test_a_configs_stamps_survive_its_run_directorys_full_dump() -> None:
    """A run directory stores its config written out in full (every default set); re-read, it must
    stamp its cells as the config it came from did, defense training included."""
    trained = {
        "name": "gaussian-noise",
        "sigma": 0.01,
        "training": {"algorithm": "fedavg", "optimizer": "adam", "local_lr": 0.001},
    }
    config = parse_config(tiny_config(defenses=["none", trained]))
    reread = parse_config(config.model_dump(mode="json"))
    cells = expand_grid(config)
    assert [Stamper(config).stamps(c) for c in cells] == [Stamper(reread).stamps(c) for c in cells]
