"""The whole source tree's identity: one hash of the package's source files that decide the numbers,
over their relative paths, stored with every cell (``environment["source"]``) and named in a leaderboard
export's block (``source tree …``). It identifies the code a run used; it does not decide staleness —
any edit or move changes it. What a published cell depends on is stamped per component
(:mod:`leakshield.experiment.stamps`), and ``leakshield leaderboard --check`` judges those.

Files that only render, parse arguments or bridge to other frameworks are left out of the hash: the
command line (``cli*.py``), the reports (``report/``, ``leaderboard/``) and the Flower bridge
(``flower/``)."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

#: package paths (relative, POSIX) whose files do not compute results
RENDERING = ("cli", "report/", "leaderboard/", "flower/", "__main__.py")


def _computes(relative: str) -> bool:
    return not any(relative.startswith(prefix) for prefix in RENDERING)


def source_files(root: Path | None = None) -> list[Path]:
    """The package's Python and YAML files that compute results, sorted by their relative path."""
    root = root or Path(__file__).resolve().parent
    files = [p for p in root.rglob("*") if p.suffix in (".py", ".yaml") and p.is_file()]
    files = [p for p in files if "__pycache__" not in p.parts and _computes(p.relative_to(root).as_posix())]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def tree_hash(root: Path | None = None) -> str:
    """A 16-hex-digit SHA-256 over the computing files' relative paths and bytes."""
    root = root or Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in source_files(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@functools.cache
def source_hash() -> str:
    """:func:`tree_hash` of the installed package (computed once per process)."""
    return tree_hash()
