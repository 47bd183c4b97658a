"""Cells in worker processes: on this machine (``--workers N``) or as Ray tasks (``--executor ray``).

The unit of work is a *chain*: the cells of one (model, defense, seed), which share the FL training
of that model (a worker trains once and attacks every round of the chain). Workers are single-threaded
(two thread-heavy processes on two cores slow each other 10–20×), compute their cells and send each
finished record back; only the driver writes images and the result store, one cell at a time, so a
SIGKILL of the driver or of a worker at any moment leaves every stored cell complete and a rerun
computes exactly the missing ones. A worker on this machine dies with its driver (Linux
``PR_SET_PDEATHSIG``), so a killed run leaves no orphan burning a core.

What a worker needs: the config (sent as JSON), the dataset files at the same path (``dataset.root``),
and the artifact cache folder (``--cache-dir``; a shared folder on a cluster, or each node fits its own
copy: artifacts are content-addressed, so concurrent fits of the same artifact write the same file).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from typing import Any

from leakshield.errors import LeakshieldError
from leakshield.experiment.cells import Cell, expand_grid
from leakshield.experiment.store import CellRecord
from leakshield.workers import init_single_threaded_worker, mark_worker, stop_workers

_WORKER: dict[str, Any] = {}


def chains(cells: list[Cell]) -> list[list[Cell]]:
    """Cells grouped by (model, defense, seed) in run order; the baseline is a chain of its own."""
    groups: dict[tuple, list[Cell]] = {}
    for cell in cells:
        key = (cell.kind == "baseline", cell.coordinates["model"], cell.coordinates["defense"], cell.seed)
        groups.setdefault(key, []).append(cell)
    return list(groups.values())


def run_chain(
    config_json: str,
    out: str,
    keys: list[str],
    device: str,
    cache_dir: str | None,
    precision: str | None = None,
) -> list[Any]:
    """Compute the cells ``keys`` of the config in this process (a worker) at the driver's matmul
    ``precision`` (None: none was chosen, torch's flags are left alone); returns (record, artifacts)
    pairs, artifacts as JSON. Nothing is written to the run directory (``out`` names the run only)."""
    from leakshield.matmul_precision import set_matmul_precision

    if precision is not None:
        set_matmul_precision(precision)
    from leakshield.experiment.code_cache import CodeKeyedCache
    from leakshield.experiment.compute import compute_cell
    from leakshield.experiment.config import parse_config
    from leakshield.experiment.world import ExperimentContext, resolve_device

    state = _WORKER.get("world")
    if state is None or state[0] != (config_json, out, device, cache_dir):
        config = parse_config(json.loads(config_json), source="worker")
        world = ExperimentContext(
            config, resolve_device(device), progress=False, cache=CodeKeyedCache(cache_dir)
        )
        _WORKER["world"] = state = ((config_json, out, device, cache_dir), world)
    world = state[1]
    by_key = {cell.key: cell for cell in expand_grid(world.config)}
    results = []
    for key in keys:
        record = compute_cell(world, by_key[key])
        results.append((record, [use.as_json() for use in world.artifacts_used]))
    return results


def local_results(
    jobs: list[list[str]],
    workers: int,
    task: Callable[[list[str]], tuple],
    keep_going: Callable[[], bool] | None = None,
) -> Iterator[tuple[CellRecord, list[dict]]]:
    """Run ``jobs`` (lists of cell keys) in ``workers`` single-threaded processes; yield each finished
    cell's record as its chain completes. With ``keep_going``, at most ``workers`` chains are in flight
    and one more starts only while ``keep_going()`` (the first ``workers`` always do); the chains
    running when it turns false finish."""
    context = get_context("spawn")
    queue, pending = list(jobs), {}
    slots = workers if keep_going is not None else len(queue)
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=context, initializer=init_single_threaded_worker
    ) as pool:

        def start(keys: list[str]) -> Any:
            return pool.submit(run_chain, *task(keys))

        top_up(queue, pending, slots, start, lambda: True)
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                finished = []
                for future in done:
                    pending.pop(future)
                    finished.extend(future.result())
                # the freed worker starts before the driver stores the results
                top_up(queue, pending, slots, start, keep_going)
                yield from finished
        except BrokenProcessPool as exc:
            left = sum(len(keys) for keys in [*pending.values(), *queue])
            raise LeakshieldError(
                f"a worker process died (killed, or out of memory); {left} cells were not computed: "
                "rerun the same command to compute them"
            ) from exc
        except KeyboardInterrupt:  # Ctrl-C: stop now, not after the running chains (stored cells stay)
            stop_workers(pool)
            raise


def ray_results(
    jobs: list[list[str]],
    address: str | None,
    task: Callable[[list[str]], tuple],
    keep_going: Callable[[], bool] | None = None,
) -> Iterator[tuple[CellRecord, list[dict]]]:
    """Run ``jobs`` as Ray tasks (one CPU each) on the cluster at ``address`` (None: a local Ray), all
    submitted at once; with ``keep_going``, as many at once as the cluster has CPUs now, and one more
    only while ``keep_going()`` (the first wave always starts)."""
    try:
        import ray
    except ImportError as exc:
        raise LeakshieldError("--executor ray needs Ray: pip install 'leakshield[ray]'") from exc
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        remote = ray.remote(num_cpus=1)(_ray_chain)
        queue, pending = list(jobs), {}
        slots = len(queue) if keep_going is None else max(1, int(ray.cluster_resources().get("CPU", 1)))

        def start(keys: list[str]) -> Any:
            return remote.remote(*task(keys))

        top_up(queue, pending, slots, start, lambda: True)
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                pending.pop(ref)
                yield from ray.get(ref)
            top_up(queue, pending, slots, start, keep_going)
    finally:
        if started:
            ray.shutdown()


def top_up(
    queue: list[Any],
    pending: dict[Any, Any],
    slots: int,
    start: Callable[[Any], Any],
    keep_going: Callable[[], bool] | None,
) -> None:
    """Start jobs from the head of ``queue`` (``pending[start(job)] = job``) while fewer than ``slots`` run
    and ``keep_going()`` (None: every job was started in the first wave, so there is nothing left to
    start). The grids' runners and the leaderboard's stage 2 hand work to processes through it, so a
    deadline leaves the jobs after it unstarted."""
    while queue and len(pending) < slots and keep_going is not None and keep_going():
        job = queue.pop(0)
        pending[start(job)] = job


def _ray_chain(*args: Any) -> list[Any]:
    mark_worker()
    return run_chain(*args)
