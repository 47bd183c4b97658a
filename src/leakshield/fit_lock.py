"""One fit per artifact across processes: the workers of a run (``--workers N``, Ray tasks on one
machine, several runs sharing a ``--cache-dir``) that need the same artifact at once take an exclusive
lock on it; one fits while the others wait, then load what it stored. Without the lock each would fit
the same artifact itself (content-addressed, so the results agree, but the work is done N times).

POSIX ``flock`` on a hidden lock file beside the artifact's folder; where there is none (Windows) or the
cache folder is read-only, no lock is taken and concurrent fits stay possible."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def fit_lock(folder: Path, digest: str, component: str) -> Iterator[None]:
    """Hold the lock of artifact ``digest`` (stored in ``folder``) for the block; a process that has to
    wait says so on stderr, once."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle = open(folder / f".{digest}.lock", "a+")  # noqa: SIM115 - held across the yield
    except OSError:  # a read-only cache folder: loading may still work, fitting will say why not
        yield
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            sys.stderr.write(f"leakshield: waiting for another process fitting {component} ({digest[:12]})\n")
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError:  # a file system without flock (some NFS, Lustre, FUSE): fit without the lock
            yield
            return
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
