"""One run per directory: an exclusive lock on ``RUN_DIR/.lock`` held while a process writes the run.

The lock is an ``fcntl.flock`` on the open file, which the operating system releases when the holder
exits in any way (SIGKILL included): a lock left by a killed run is stale by construction and the next
run takes it over. The file records the holder (PID, host, start time) so that a refused process can
say who holds it."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from types import TracebackType

from leakshield.errors import RunDirectoryError, storage_errors

LOCK_FILE = ".lock"


class RunLock:
    """``with RunLock(run_dir):`` — refused at once (:class:`RunDirectoryError`, one line naming the
    holder) when another process holds the run directory."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self._handle = None

    def __enter__(self) -> RunLock:
        with storage_errors(self.path, "give an --out on a writable disk with space"):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle = self.path.open("a+")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = _describe(handle.read())
            handle.close()
            raise RunDirectoryError(
                f"{self.path.parent} is in use by {holder}; wait for it to finish or stop it "
                "(one run per directory)"
            ) from None
        handle.seek(0)
        handle.truncate()
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
        handle.write(json.dumps(holder))
        handle.flush()
        self._handle = handle
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle.fileno(), fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None


def _describe(text: str) -> str:
    try:
        holder = json.loads(text)
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(holder["started"])))
        return f"process {holder['pid']} on {holder['host']} (started {started})"
    except (ValueError, KeyError, TypeError):
        return "another process"
