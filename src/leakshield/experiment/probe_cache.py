"""The dry run's probe times kept between dry runs (``dry-run-probes-*.json`` in the artifact cache).

A probe's seconds depend on the code it runs, its settings and the machine. Each kept time is keyed by
what its probe depends on: the probe's set-up (dataset, federation, victims, model, the attack or the
defense and its scale, as :mod:`~leakshield.experiment.estimate` keys its in-run memo), the stamps
(:mod:`~leakshield.experiment.stamps`) of the components the probed cell runs through — the code they
reach and their settings —, how the cells execute (``execution``) and the estimator's own code. Each
machine set-up (device, torch build, threads, matmul precision, processor, host) keeps its own file, so
a dry run with one worker and one with two (one thread each) do not overwrite each other's. A second dry
run therefore reuses every probe whose code and settings are unchanged and probes only what changed: an
edit to one attack re-probes that attack's kinds and nothing else, an edit to the shared core or to the
estimator re-probes everything.

A kept time is a measurement on a machine that may be busier or idler now, and it does not notice a
data file replaced at the same path; delete the files, or give the run a new ``--cache-dir``, to probe
everything again. The files are a cache: a damaged one is set aside (said once) and rewritten, and one
that cannot be written costs the next dry run its probes, not this one its estimate."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import platform
import socket
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from leakshield.errors import StorageError
from leakshield.experiment.store import atomic_write_bytes

#: the files' stems in the artifact cache: the grid estimator's probes and the leaderboard's fit probes
#: (each machine set-up its own file: ``<stem>-<digest of the set-up>.json``)
GRID_PROBES = "dry-run-probes"
FIT_PROBES = "dry-run-fits"
#: the estimator's modules: a change to how probes are timed or extrapolated invalidates every kept time
ESTIMATOR_MODULES = (
    "leakshield.experiment.estimate",
    "leakshield.experiment.attack_probe",
    "leakshield.experiment.probe_budgets",
    "leakshield.experiment.probe_cache",
    "leakshield.leaderboard.fit_probe",
)
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
        "matmul": torch.get_float32_matmul_precision(),
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "host": socket.gethostname(),
    }
    if where.startswith("cuda") and torch.cuda.is_available():
        found["gpu"] = torch.cuda.get_device_name(torch.device(where))
    return found


def probe_key(*parts: object) -> str:
    """The kept time's key: a digest of what the probe depends on (set-up, stamps) and of the
    estimator's own code (:data:`ESTIMATOR_MODULES`)."""
    blob = json.dumps([estimator_code(), *parts], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


@functools.cache
def estimator_code() -> str:
    """A digest of the estimator modules' source (read once per process)."""
    digest = hashlib.sha256()
    for name in ESTIMATOR_MODULES:  # found, not imported: the experiment layer loads no leaderboard module
        spec = importlib.util.find_spec(name)
        digest.update(Path(spec.origin).read_bytes() if spec and spec.origin else name.encode())
    return digest.hexdigest()[:16]


def kept_path(cache_root: Path, stem: str, device: torch.device | str | None) -> Path:
    """The file of ``stem`` for this machine set-up in ``cache_root``."""
    digest = hashlib.sha256(json.dumps(machine(device), sort_keys=True).encode()).hexdigest()[:12]
    return cache_root / f"{stem}-{digest}.json"


class KeptProbes:
    """Probe times of earlier dry runs on this machine, read from ``path`` (None: keep nothing)."""

    def __init__(self, path: Path | None, device: torch.device | str | None) -> None:
        """``path``: the file (:func:`kept_path` names one per machine set-up); None keeps nothing."""
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
        try:
            atomic_write_bytes(self.path, json.dumps(document, indent=0).encode())  # labels keep their order
        except (StorageError, OSError) as exc:  # the estimate stands; the next dry run probes again
            print(f"note: the probe times were not kept ({exc})", file=sys.stderr)

    def summary(self) -> str:
        """One line: how many probes were reused and how many run."""
        where = f" ({self.path})" if self.path is not None else ""
        aside = f"; {self.set_aside}" if self.set_aside else ""
        return f"probes: {self.probed} run, {self.reused} reused from earlier dry runs{where}{aside}"


@dataclass
class ProbeMemo:
    """Probe times shared by the grids of one dry run, keyed by everything in the config a probe's time
    depends on (dataset, federation, victims, attacked update, model, the defense or attack and its
    scale, how cells execute), so a scenario that repeats the main grid's set-up reuses its times
    instead of re-probing; and, through :attr:`kept`, by earlier dry runs."""

    rounds: dict[str, Measured] = field(default_factory=dict)
    attacks: dict[str, Measured] = field(default_factory=dict)
    fits: dict[str, Measured] = field(default_factory=dict)
    #: cells timed whole (no-information baselines, client guards' detection), by cell key
    cells: dict[str, Measured] = field(default_factory=dict)
    #: times kept from earlier dry runs on this machine; None: none kept
    kept: KeptProbes | None = None
    #: how the grid being estimated executes its cells (``execution``): part of every key
    execution: object = None

    def seconds(
        self, table: dict[str, Measured], key: str, stamps: dict[str, str], probe: Callable[[], Any]
    ) -> Any:
        """``table``'s time of ``key`` (under this grid's execution), else the kept time of ``key``
        under code and settings ``stamps``, else ``probe()``."""
        here = json.dumps([key, self.execution], sort_keys=True, default=str)
        if here not in table:
            kept = self.kept
            table[here] = (
                probe() if kept is None else kept.seconds(probe_key(key, stamps, self.execution), probe)
            )
        return table[here]

    def save(self) -> None:
        """Keep this dry run's probe times for the next (a no-op without :attr:`kept`)."""
        if self.kept is not None:
            self.kept.save()


def kept_probes(cache_root: Path, stem: str, device: torch.device | str | None) -> KeptProbes:
    """The probe times earlier dry runs on this machine set-up kept in ``cache_root`` under ``stem``."""
    return KeptProbes(kept_path(cache_root, stem, device), device)


def kept_memo(cache_root: Path, device: torch.device | str | None) -> ProbeMemo:
    """A memo holding the probe times earlier dry runs on this machine kept in ``cache_root``."""
    return ProbeMemo(kept=kept_probes(cache_root, GRID_PROBES, device))


@contextlib.contextmanager
def memo_for(
    memo: ProbeMemo | None, cache_root: Path, device: torch.device | str | None
) -> Iterator[ProbeMemo]:
    """``memo`` (a dry run's, shared by its grids), or one grid's own :func:`kept_memo`, saved on leaving
    (also when the dry run is stopped)."""
    if memo is not None:
        yield memo
        return
    own = kept_memo(cache_root, device)
    try:
        yield own
    finally:
        own.save()
