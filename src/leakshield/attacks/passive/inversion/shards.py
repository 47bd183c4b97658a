"""The victims of one attack sharded over single-threaded worker processes (``victim_shards: N``).

Each shard is a contiguous share of the victims, attacked in its own process by the attack's own
many-victim path (calibrated there, at one thread) with the victims' own seeds; the reconstructions
come back in victim order, each with ``victim_shards`` in its stats. The worker processes are started
on first use and kept for this process's later attacks. On a CPU, small models gain more
from processes than from threads (their steps are many small operations that one thread cannot
overlap), e.g. 16 compiled LeNet victims: see the manual's Speed and scale page. Use at most one shard per
core. Inside a worker of ``leakshield run --workers N`` or ``--executor ray`` (one core each already)
the attack runs unsharded.

CPU only: on a GPU the shards would share one device, so the attack runs unsharded there.
"""

from __future__ import annotations

import atexit
import dataclasses
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context

from leakshield.attacks.base import Reconstruction
from leakshield.attacks.passive.inversion.problem import MatchingProblem
from leakshield.errors import LeakshieldError
from leakshield.fl.types import ServerView
from leakshield.workers import init_single_threaded_worker, stop_workers

_POOLS: dict[int, ProcessPoolExecutor] = {}


def attack_in_shards(
    attack: MatchingProblem, views: Sequence[ServerView], seeds: Sequence[int]
) -> list[Reconstruction]:
    """Attack ``views`` in ``attack.execution.victim_shards`` worker processes (fewer if fewer victims)."""
    shards = min(attack.execution.victim_shards, len(views))
    bounds = [round(k * len(views) / shards) for k in range(shards + 1)]
    parts = [list(range(bounds[k], bounds[k + 1])) for k in range(shards)]
    one = attack.with_execution(victim_shards=1)
    pool = _pool(shards)
    futures = [pool.submit(_shard, one, [views[i] for i in p], [seeds[i] for i in p]) for p in parts]
    try:
        done = [future.result() for future in futures]
    except BrokenProcessPool as exc:
        _POOLS.pop(shards, None)
        raise LeakshieldError(
            f"a victim-shard worker of {attack.name} died (killed, or out of memory); "
            "rerun, or lower victim_shards"
        ) from exc
    except KeyboardInterrupt:
        stop_workers(_POOLS.pop(shards))
        raise
    tag = {"victim_shards": float(shards)}
    return [dataclasses.replace(r, stats={**r.stats, **tag}) for part in done for r in part]


def _pool(workers: int) -> ProcessPoolExecutor:
    """This process's pool of ``workers`` shard workers, started once and kept: a worker keeps its
    imports, calibrations and compiled steps for the next attack (starting one costs seconds)."""
    if workers not in _POOLS:
        context = get_context("spawn")
        _POOLS[workers] = ProcessPoolExecutor(
            workers, mp_context=context, initializer=init_single_threaded_worker
        )
    return _POOLS[workers]


@atexit.register
def _shutdown() -> None:
    for pool in _POOLS.values():
        pool.shutdown(wait=False, cancel_futures=True)


def _shard(attack: MatchingProblem, views: list[ServerView], seeds: list[int]) -> list[Reconstruction]:
    return attack.reconstruct_many(views, seeds=seeds, progress=False)
