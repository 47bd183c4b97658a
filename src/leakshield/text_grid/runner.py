"""The text grid runner: computes the cells of a text config not yet stored in its run directory, one
group (shared victims' updates) at a time, each cell stored atomically in the same result store as the
image grids, so an interrupted run resumes where it stopped and a finished one is left as it is. Each
cell carries its components' stamps (:mod:`leakshield.text_grid.stamps`); a stored cell whose code or
settings changed since is computed again."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from leakshield.experiment.code_cache import CodeKeyedCache
from leakshield.experiment.compute import environment
from leakshield.experiment.lock import RunLock
from leakshield.experiment.rundir import STORE_FILE, check_run_dir, prepare_run_dir
from leakshield.experiment.runner import drop_stale, stamped
from leakshield.experiment.stamps import stale_keys
from leakshield.experiment.store import ResultStore
from leakshield.experiment.world import resolve_device
from leakshield.text_grid.cells import TextCell, compute_group, expand_text_grid
from leakshield.text_grid.config import TextExperimentConfig
from leakshield.text_grid.stamps import TextStamper
from leakshield.text_grid.world import TextWorld


@dataclass(frozen=True)
class TextRunSummary:
    total: int
    computed: int
    skipped: int
    failed: int
    out: Path
    #: stored cells computed again because their code or settings changed
    restamped: int = 0


class TextGridRunner:
    """Runs every cell of a text ``config`` not yet in ``out``.

    >>> TextGridRunner(config, "runs/text").run()  # doctest: +SKIP
    """

    def __init__(self, config: TextExperimentConfig, out: str | Path, *, device: str = "auto",
                 progress: bool = True, cache_dir: str | Path | None = None) -> None:  # fmt: skip
        self.config = config
        self.out = Path(out)
        self.device = resolve_device(device)
        self.progress = progress
        self.cache = CodeKeyedCache(cache_dir)

    def cells(self) -> list[TextCell]:
        return expand_text_grid(self.config)

    def run(self, *, retry_failed: bool = False) -> TextRunSummary:
        """Compute the cells not yet stored (``retry_failed``: also those stored as failed)."""
        exists = check_run_dir(self.config, self.out)  # type: ignore[arg-type]
        store_path = self.out / STORE_FILE
        cells = self.cells()
        stamper = TextStamper(self.config)
        stamps = {cell.key: stamper.stamps(cell) for cell in cells}
        done: set[str] = set()
        if exists and store_path.exists():
            existing = ResultStore(store_path)
            existing.check(self.config.fingerprint())
            done = existing.finished_keys(include_failed=not retry_failed) - stale_keys(existing, stamps)
        todo = [c for c in cells if c.key not in done]
        failed = computed = restamped = 0
        if todo:
            self.cache.ensure_usable()
            world = TextWorld(self.config, self.device, progress=self.progress, cache=self.cache)
            with RunLock(self.out):
                prepare_run_dir(self.config, self.out)  # type: ignore[arg-type]
                store = ResultStore(store_path)
                store.claim(self.config.fingerprint())
                if retry_failed:
                    store.drop_failed()
                restamped = drop_stale(store, stamps, self.config.name, self.progress)
                done = store.finished_keys(include_failed=not retry_failed)
                todo = [c for c in cells if c.key not in done]
                bar = tqdm(total=len(todo), desc=self.config.name, unit="cell", disable=not self.progress)
                for _, group in itertools.groupby(todo, key=lambda c: c.group):
                    members = list(group)
                    bar.set_postfix_str(members[0].key.split("|", 2)[-1][:60])
                    for record in compute_group(world, members, environment(self.device)):
                        store.put(stamped(record, stamps))
                        computed += 1
                        if record.status == "failed":
                            failed += 1
                            if self.progress:
                                tqdm.write(f"cell failed ({record.key}): {record.error}")
                        bar.update(1)
                bar.close()
        elif exists:
            with RunLock(self.out):
                prepare_run_dir(self.config, self.out)  # type: ignore[arg-type]
        return TextRunSummary(len(cells), computed, len(cells) - len(todo), failed, self.out, restamped)
