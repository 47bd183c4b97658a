"""One-off migration (issue: provenance per component): stamp the cells of a published leaderboard
export with their components' stamps, computed from the source tree that produced the export.

The export records the legacy whole-tree hash of the code that computed it (``run.source``). This script
extracts the package at ``--commit`` from git, checks that its legacy hash is that source, builds the
import graph of *that* tree and stamps every cell from it, with the shipped leaderboard file of that
tree; the cells' numbers are not touched. ``tests/test_provenance.py`` checks the result against the
same commit.

    python scripts/stamp_published_export.py docs/leaderboard/standard.json --commit 19a0a64
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from leakshield.code_graph import CodeGraph
from leakshield.leaderboard.export_schema import numbers_digest, read_export
from leakshield.leaderboard.presets import load_leaderboard, load_scenarios
from leakshield.leaderboard.published import stamp_export
from leakshield.provenance import tree_hash


def package_at(commit: str, where: Path) -> Path:
    """Extract ``src/leakshield`` of ``commit`` under ``where``; the package folder."""
    archive = subprocess.run(["git", "archive", commit, "src/leakshield"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive.stdout, check=True)
    return where / "src" / "leakshield"


def stamp(export: Path, commit: str) -> None:
    data = json.loads(read_export(export, ""))  # a damaged export is refused, not stamped
    facts = data["run"]
    with tempfile.TemporaryDirectory() as tmp:
        root = package_at(commit, Path(tmp))
        legacy = tree_hash(root)
        if legacy != facts["source"]:
            sys.exit(f"{commit}'s package hashes to {legacy}, the export was computed by {facts['source']}")
        graph = CodeGraph(root)
        shipped = root / "configs" / "leaderboard.yaml"
        main = load_leaderboard(facts["preset"], path=shipped)
        scenarios = {name: c for name, c, _ in load_scenarios(facts["preset"], path=shipped)}
        data = stamp_export(data, main, scenarios, graph)
    facts["stamped"] = {"commit": commit, "source": legacy}
    data = {**data, "run": facts, "digest": numbers_digest(data)}  # the numbers are not touched
    export.write_text(json.dumps(data, indent=0, sort_keys=True))
    cells = len(data["cells"]) + sum(len(s["cells"]) for s in data["scenarios"])
    components = len(data["provenance"])
    print(f"{export}: {cells} cells stamped from {commit} (source tree {legacy}), {components} components")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("export", type=Path)
    parser.add_argument("--commit", required=True)
    args = parser.parse_args()
    stamp(args.export, args.commit)
