"""The manual's runnable pages run: every ``python`` and ``bash`` block of the tutorials and how-to
guides is executed in order, in an empty folder (python blocks share one namespace; ``yaml`` blocks with
a ``title="FILE"`` are written to FILE first), so a page that drifts from the code fails here. Blocks a
page only shows (a cluster's address, ``flwr run``) are fenced ``console``; tutorials may have none."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted([*DOCS.glob("tutorials/*.md"), *DOCS.glob("howto/*.md")])
README = DOCS.parent / "README.md"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
RUN = {"python", "bash"}


def blocks(page: Path) -> list[tuple[str, str, str]]:
    """(language, fence attributes, code) of every fenced block, in order."""
    return [(m.group(1), m.group(2), m.group(3)) for m in FENCE.finditer(page.read_text())]


def runnable(page: Path) -> bool:
    return any(lang in RUN for lang, _, _ in blocks(page))


RUNNABLE = [page for page in PAGES if runnable(page)]


def test_the_runnable_pages_are_found_and_tutorials_only_hold_runnable_blocks():
    names = {f"{p.parent.name}/{p.stem}" for p in RUNNABLE}
    assert {
        "tutorials/first-leak",
        "tutorials/compare-defenses",
        "tutorials/text-leak",
        "howto/own-defense",
    } <= names, names
    assert {"howto/add-attack", "howto/datasets"} <= names, names
    for page in DOCS.glob("tutorials/*.md"):
        shown = [lang for lang, attrs, _ in blocks(page) if lang not in RUN and "title=" not in attrs]
        assert not shown, f"{page.name}: a tutorial block that would not run: {shown}"


# runs a page's steps in a fresh interpreter: a page may register components (a how-to's own defense),
# which must not leak into the registries the other tests read
DRIVER = """
import json, subprocess, sys
from pathlib import Path
namespace = {"__name__": "__docs__"}
steps = json.loads(Path(sys.argv[1]).read_text())
for kind, name, code in steps:
    if kind == "file":
        Path(name).write_text(code)
    elif kind == "python":
        exec(compile(code, name, "exec"), namespace)
    else:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", code], capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"{name} failed:\\n{code}\\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
print("steps run:", sum(kind != "file" for kind, _, _ in steps))
"""


#: whether pytest-xdist workers share the cores: a page's processes (and the commands its blocks start)
#: then run on one core, as each worker's tests run on one thread; a page at two threads beside the other
#: worker oversubscribed the cores and ran 4–17× slower than alone (measured: 223 s against 13 s)
SHARED_CORES = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1 and hasattr(os, "sched_setaffinity")


def one_core() -> None:
    """Pin this (child) process and all it starts to the last core it may use: torch's OpenMP team,
    ``tokenizers``' thread pool and ``leakshield``'s own thread count all size themselves by it."""
    os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})


#: pages whose blocks start a Flower simulation engine (Ray) for a federation of several rounds: 40–80 s
#: each on 2 cores, kept out of the default run (``pytest -m slow``); the component each shows has its
#: own end-to-end test in the default run (test_leakage_filter.py)
SLOW_PAGES = {"leakage-filter"}


def _pages() -> list:
    slow = pytest.mark.slow
    return [*(pytest.param(p, marks=slow) if p.stem in SLOW_PAGES else p for p in RUNNABLE), README]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_block_of_the_page_runs(page, tmp_path, request):
    """The README's Python runs too (its shell blocks are the set-up and long runs, shown only). The
    text tutorial finds the corpus where ``leakshield fetch-corpus`` puts it (a link to the test copy)."""
    if page.stem == "text-leak":
        for module in ("transformers", "tokenizers", "rouge_score"):  # the text extra
            pytest.importorskip(module)
        corpus = request.getfixturevalue("rotten_tomatoes_csv")
        cached = Path(os.environ["LEAKSHIELD_CACHE_DIR"]) / "data" / corpus.name
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.symlink_to(corpus)
    languages = {"python"} if page == README else RUN
    steps = []
    for number, (lang, attrs, code) in enumerate(blocks(page), start=1):
        title = re.search(r'title="([^"]+)"', attrs)
        if title and lang not in RUN:
            steps.append(("file", title.group(1), code))
        elif lang in languages:
            steps.append((lang, f"{page.name}, block {number} ({lang})", code))
    (tmp_path / "steps.json").write_text(json.dumps(steps))
    (tmp_path / "driver.py").write_text(DRIVER)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        [sys.executable, "driver.py", "steps.json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        preexec_fn=one_core if SHARED_CORES else None,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "steps run:" in done.stdout


def test_nothing_points_outside_the_repository():
    """The package, its manual and its front pages cite the project's own files, never material a user
    does not have (the development notes' sections, a sibling folder)."""
    root = DOCS.parent
    files = [
        *root.glob("src/leakshield/**/*.py"),
        *root.glob("src/leakshield/**/*.yaml"),
        *DOCS.rglob("*.md"),
    ]
    files += [root / name for name in ("README.md", "CONTRIBUTING.md", "CHANGELOG.md", "mkdocs.yml")]
    pattern = re.compile(r"\bSPEC\b|\.\./shared|DESIGN\.md")
    found = [
        f"{f.relative_to(root)}:{n}"
        for f in files
        for n, line in enumerate(f.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert len(files) > 150 and not found, found
