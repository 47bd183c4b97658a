"""The dry run's probe times kept between dry runs (``dry-run-probes.json`` in the artifact cache).

A probe's seconds depend on the code it runs, its settings and the machine. Each kept time is keyed by
what its probe depends on: the probe's set-up (dataset, federation, victims, model, the defense or
attack and its scale, as :mod:`~leakshield.experiment.estimate` keys its in-run memo) and the stamps
(:mod:`~leakshield.experiment.stamps`) of the components the probed cell runs through — the code they
reach and their settings. The file is tied to the machine that measured it (device, torch build,
threads, processor, host); one measured elsewhere is set aside whole. A second dry run therefore reuses
every probe whose code and settings are unchanged and probes only what changed: an edit to one attack
re-probes that attack's kinds and nothing else, an edit to the shared core re-probes everything.

A kept time is a measurement on a machine that may be busier or idler now; delete the file, or give
the run a new ``--cache-dir``, to probe everything again. The file is a cache: a damaged or foreign
one is set aside (said once) and rewritten."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from leakshield.experiment.store import atomic_write_bytes

#: the file names in the artifact cache: the grid estimator's probes and the leaderboard's fit probes
GRID_PROBES = "dry-run-probes.json"
FIT_PROBES = "dry-run-fits.json"
#: kept times beyond this many are dropped, those not used by the latest dry run first
MOST_KEPT = 4096
VERSION = 1


#: what a probe measures: seconds, None (not estimated), or seconds by label
Measured = float | None | dict[str, float]


def _valid(value: object) -> bool:
    number = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
    if isinstance(value, dict):
        return all(isinstance(k, str) and _valid(v) and v is not None for k, v in value.items())
    return value is None or number


def machine(device: torch.device | str | None) -> dict[str, Any]:
    """What a probe's seconds depend on besides its code and settings."""
    where = str(device or "cpu")
    found: dict[str, Any] = {
        "device": where,
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "host": socket.gethostname(),
    }
    if where.startswith("cuda") and torch.cuda.is_available():
        found["gpu"] = torch.cuda.get_device_name(torch.device(where))
    return found


def probe_key(*parts: object) -> str:
    """The kept time's key: a digest of what the probe depends on (set-up, stamps)."""
    blob = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


class KeptProbes:
    """Probe times of earlier dry runs on this machine, read from ``path`` (None: keep nothing)."""

    def __init__(self, path: Path | None, device: torch.device | str | None) -> None:
        self.path = path
        self.machine = machine(device)
        self.times: dict[str, Measured] = {}
        self.used: set[str] = set()
        self.reused = 0
        self.probed = 0
        self.set_aside: str | None = None
        if path is not None and path.is_file():
            self._read(path)

    def _read(self, path: Path) -> None:
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
            times = document["times"]
            ok = isinstance(times, dict) and all(isinstance(k, str) and _valid(v) for k, v in times.items())
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
            self.set_aside = f"{path} is damaged: probing everything, then rewriting it"
            return
        if not ok or document.get("version") != VERSION:
            self.set_aside = f"{path} is not a probe file of this version: probing everything"
        elif document.get("machine") != self.machine:
            self.set_aside = f"{path} was measured on another machine or set-up: probing everything"
        else:
            self.times = times

    def seconds(self, key: str, probe: Callable[[], Measured]) -> Measured:
        """The kept result of ``key``, else ``probe()`` (kept; an exception propagates, keeping nothing):
        seconds, None (not estimated), or seconds by label (the leaderboard's fit probes)."""
        self.used.add(key)
        if key in self.times:
            self.reused += 1
            return self.times[key]
        value = probe()
        self.probed += 1
        self.times[key] = value
        return value

    def save(self) -> None:
        """Write the kept times (those used now first, at most :data:`MOST_KEPT`) atomically."""
        if self.path is None or (self.probed == 0 and not self.set_aside):
            return
        order = [k for k in self.times if k in self.used] + [k for k in self.times if k not in self.used]
        kept = {k: self.times[k] for k in order[:MOST_KEPT]}
        document = {"version": VERSION, "machine": self.machine, "times": kept}
        atomic_write_bytes(self.path, json.dumps(document, indent=0).encode())  # labels keep their order

    def summary(self) -> str:
        """One line: how many probes were reused and how many run."""
        where = f" ({self.path})" if self.path is not None else ""
        aside = f"; {self.set_aside}" if self.set_aside else ""
        return f"probes: {self.probed} run, {self.reused} reused from earlier dry runs{where}{aside}"
