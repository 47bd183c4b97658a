"""Single-threaded worker processes on this machine: one initializer for every process pool leakshield
starts (cells in ``leakshield run --workers N``, victim shards of one attack).

Two thread-heavy processes on two cores slow each other 10–20×, so a worker uses one thread; it ignores
Ctrl-C (the whole process group receives it, and the parent stops its workers itself) and dies with its
parent (Linux ``PR_SET_PDEATHSIG``), so a killed run leaves no orphan burning a core.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from concurrent.futures import ProcessPoolExecutor

_IN_WORKER = False


def in_worker() -> bool:
    """True in a leakshield worker process (cells or shards), which must not start workers of its own."""
    return _IN_WORKER


def mark_worker() -> None:
    global _IN_WORKER
    import torch

    torch.set_num_threads(1)
    _IN_WORKER = True


def init_single_threaded_worker() -> None:
    mark_worker()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError, AttributeError):  # Linux only
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() == 1:  # the parent died before the call above
        os._exit(1)


def stop_workers(pool: ProcessPoolExecutor) -> None:
    """Terminate the pool's worker processes and drop its queued tasks (Python 3.11 has no public way
    to stop a running task; ``_processes`` is the executor's own table of its workers)."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
