"""The grid runner: expands a config into cells, runs the missing ones, stores each atomically."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from leakshield.experiment.cells import Cell, expand_grid
from leakshield.experiment.code_cache import CodeKeyedCache
from leakshield.experiment.compatibility import check_attacks_fit_models, check_defenses_fit_clients
from leakshield.experiment.compute import compute_cell, environment
from leakshield.experiment.config import ExperimentConfig
from leakshield.experiment.fitting import ArtifactUse
from leakshield.experiment.lock import RunLock
from leakshield.experiment.parallel import chains, local_results, ray_results
from leakshield.experiment.rundir import ARTIFACTS_FILE, STORE_FILE, check_run_dir, prepare_run_dir
from leakshield.experiment.stamps import Stamper, stale_keys
from leakshield.experiment.store import (
    CellRecord,
    CorruptStoreError,
    ResultStore,
    atomic_write_bytes,
    repair_store,
)
from leakshield.experiment.world import ExperimentContext, resolve_device
from leakshield.matmul_precision import ENV as MATMUL_ENV


@dataclass(frozen=True)
class RunSummary:
    total: int
    computed: int
    skipped: int
    failed: int
    out: Path
    #: (cells kept, where the damaged store went) when ``--repair`` repaired the store
    repaired: tuple[int, Path] | None = None
    #: stored cells recomputed because the code or settings of a component they ran through changed
    restamped: int = 0
    #: the run stopped at its deadline (``stop_at``) with cells left: a rerun computes them
    stopped: bool = False


class ExperimentRunner:
    """Runs every cell of ``config`` not yet in ``out``; see :func:`prepare_run_dir` for safety.

    >>> ExperimentRunner(config, Path("runs/demo")).run()  # doctest: +SKIP
    """

    def __init__(
        self,
        config: ExperimentConfig,
        out: str | Path,
        *,
        device: str = "auto",
        progress: bool = True,
        cache_dir: str | Path | None = None,
    ) -> None:
        self.config = config
        self.out = Path(out)
        self.device = resolve_device(device)
        self.progress = progress
        self.cache = CodeKeyedCache(cache_dir)

    @property
    def environment(self) -> dict[str, object]:
        """What a cell's float results may depend on beyond config and seed (reduction order)."""
        return environment(self.device)

    def cells(self) -> list[Cell]:
        return expand_grid(self.config)

    def run(
        self,
        *,
        retry_failed: bool = False,
        repair: bool = False,
        workers: int = 1,
        executor: str = "local",
        address: str | None = None,
        stop_at: float | None = None,
    ) -> RunSummary:
        """Compute the cells not yet stored. ``retry_failed``: recompute cells stored as failed.
        ``repair``: if the store is damaged, move it aside, keep its readable cells, recompute the rest
        (without it a damaged store is a :class:`CorruptStoreError`). ``workers`` > 1: that many
        single-threaded worker processes; ``executor`` ``ray``: Ray tasks on the cluster at ``address``
        (see :mod:`~leakshield.experiment.parallel`). ``stop_at``: a ``time.monotonic()`` after which no
        cell (in workers: no chain) starts; the running ones finish and are stored, at least one cell or
        one chain per worker runs, and a rerun computes the rest (cells are pure functions of the
        config and their key, so the result is the uninterrupted run's)."""
        if executor not in ("local", "ray"):
            raise ValueError(f"executor: {executor!r}; allowed: local, ray")
        exists = check_run_dir(self.config, self.out)
        store_path = self.out / STORE_FILE
        cells = self.cells()
        stamps = self.stamps(cells)
        done: set[str] = set()
        if exists and store_path.exists() and not repair:
            existing = ResultStore(store_path)
            existing.check(self.config.fingerprint())
            done = existing.finished_keys(include_failed=not retry_failed) - stale_keys(existing, stamps)
        todo = [c for c in cells if c.key not in done]
        failed, repaired, restamped, computed = 0, None, 0, 0

        def keep_going() -> bool:
            return stop_at is None or time.monotonic() < stop_at

        if todo:
            self.cache.ensure_usable()  # an unusable --cache-dir is refused before any work
            # loading data and checking victims may fail on bad input: do it before writing anything
            parallel = workers > 1 or executor == "ray"
            context = ExperimentContext(
                self.config, self.device, progress=self.progress and not parallel, cache=self.cache
            )
            check_attacks_fit_models(self.config, context.info)
            check_defenses_fit_clients(self.config, context.clients)
            with RunLock(self.out):
                prepare_run_dir(self.config, self.out)
                if repair and store_path.exists():
                    repaired = _repair_if_damaged(store_path)
                store = ResultStore(store_path)
                store.claim(self.config.fingerprint())
                if retry_failed:
                    store.drop_failed()
                restamped = drop_stale(store, stamps, self.config.name, self.progress)
                done = store.finished_keys(include_failed=not retry_failed)
                todo = [c for c in cells if c.key not in done]
                bar = tqdm(todo, desc=self.config.name, unit="cell", disable=not self.progress)
                if parallel:
                    until = keep_going if stop_at is not None else None
                    for record, used in self._parallel(todo, workers, executor, address, until):
                        failed += self._store(store, stamped(record, stamps), used)
                        computed += 1
                        bar.update(1)
                else:
                    for cell in bar:
                        if computed and not keep_going():
                            break
                        bar.set_postfix_str(cell.describe()[:60])
                        record = self.compute_cell(context, cell)
                        used = [u.as_json() for u in context.artifacts_used]
                        failed += self._store(store, stamped(record, stamps), used)
                        computed += 1
                bar.close()
        elif exists:  # nothing to compute: refresh the stored config so a new report layout takes effect
            with RunLock(self.out):
                prepare_run_dir(self.config, self.out)
        return RunSummary(
            total=len(cells),
            computed=computed,
            skipped=len(cells) - len(todo),
            failed=failed,
            out=self.out,
            repaired=repaired,
            restamped=restamped,
            stopped=computed < len(todo),
        )

    def stamps(self, cells: list[Cell]) -> dict[str, dict[str, str]]:
        """Each cell's component stamps under the installed code (:mod:`~leakshield.experiment.stamps`)."""
        stamper = Stamper(self.config)
        return {cell.key: stamper.stamps(cell) for cell in cells}

    def _parallel(self, todo: list[Cell], workers: int, executor: str, address: str | None, keep_going):
        jobs = [[cell.key for cell in chain] for chain in chains(todo)]
        config_json = json.dumps(self.config.model_dump(mode="json"))
        cache = str(self.cache.root)

        precision = os.environ.get(MATMUL_ENV)  # the choice made, if any: a Ray node does not inherit it

        def task(keys: list[str]) -> tuple:
            return (config_json, str(self.out), keys, str(self.device), cache, precision)

        if executor == "ray":
            return ray_results(jobs, address, task, keep_going)
        return local_results(jobs, workers, task, keep_going)

    def _store(self, store: ResultStore, record: CellRecord, used: list[dict]) -> bool:
        """Write a computed cell (image, then its row) and the artifacts it used; True if it failed."""
        if record.images and record.image_png is not None:
            atomic_write_bytes(self.out / record.images, record.image_png)
        record_artifacts(self.out, used)  # before the row: a stored cell is never rerun to record them
        store.put(record)
        if record.status == "failed" and self.progress:
            tqdm.write(f"cell failed ({record.key}): {record.error}")
        return record.status == "failed"

    def compute_cell(self, context: ExperimentContext, cell: Cell) -> CellRecord:
        """Compute one cell (see :func:`~leakshield.experiment.compute.compute_cell`)."""
        return compute_cell(context, cell)


def stamped(record: CellRecord, stamps: dict[str, dict[str, str]]) -> CellRecord:
    """``record`` with its components' stamps in its ``environment`` (the driver stamps what its
    workers computed: both run the same installed code)."""
    environment = {**record.environment, "components": stamps[record.key]}
    return dataclasses.replace(record, environment=environment)


def drop_stale(store: ResultStore, stamps: dict[str, dict[str, str]], name: str, progress: bool) -> int:
    """Delete the stored cells of a grid whose stamps differ from ``stamps`` (they are computed again),
    said in one line when ``progress``; how many."""
    restamped = drop_cells(store, stale_keys(store, stamps))
    if restamped and progress:
        tqdm.write(f"{name}: recomputing {restamped} stored cell(s) whose code or settings changed since "
                   "they were computed")  # fmt: skip
    return restamped


def drop_cells(store: ResultStore, keys: set[str]) -> int:
    """Delete the stored rows of ``keys`` (they are then computed again); the number deleted. Kept
    here, not as a store method: the store's module is part of every cell's shared core, and an edit
    to it would stale every stored cell."""
    if not keys:
        return 0
    with store._connect() as db:
        return sum(db.execute("DELETE FROM cells WHERE key = ?", (key,)).rowcount for key in sorted(keys))


def _repair_if_damaged(path: Path) -> tuple[int, Path] | None:
    try:
        ResultStore(path).records()  # every row decodes, not only the pages
    except CorruptStoreError:
        return repair_store(path)
    return None


def record_artifacts(out: Path, used: list[ArtifactUse] | list[dict]) -> None:
    """Write ``artifacts.json``: the fitted artifacts the run used (merged with earlier sessions')."""
    if not used:
        return
    path = out / ARTIFACTS_FILE
    known: list[dict] = []
    if path.exists():
        try:
            known = json.loads(path.read_text())["artifacts"]
        except (OSError, ValueError, KeyError, TypeError):
            known = []
    for use in used:
        entry = use if isinstance(use, dict) else use.as_json()
        if entry not in known:
            known.append(entry)
    atomic_write_bytes(path, json.dumps({"artifacts": known}, indent=2).encode())
