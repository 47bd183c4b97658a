"""``leakshield leaderboard --dry-run``: the estimate of every grid (the main grid and each scenario) and
the probe of the fits the grid estimator leaves out (:mod:`leakshield.leaderboard.fit_probe`).

The two parts are independent, so with ``--workers`` 2 or more they run side by side in two
single-threaded worker processes — the way the cells they time will run — and the estimator takes
about the longer part's time instead of the sum. The grids share one
:class:`~leakshield.experiment.estimate.ProbeMemo`, so a scenario reuses the main grid's probes of an
identical set-up. With one worker both parts run in this process, one after the other.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leakshield.workers import init_single_threaded_worker, stop_workers

if TYPE_CHECKING:
    from leakshield.experiment import ExperimentRunner

#: (title, config as JSON, run directory) of each grid of the dry run, the main grid first
Grid = tuple[str, str, str]


@dataclass
class GridPart:
    """One grid's printed estimate, its seconds for the workers, whether it left kinds to the fit probe
    and how many kinds it left out."""

    text: str
    seconds: float
    wants_fits: bool
    not_estimated: int
    #: (model, attack, scale label) → seconds of one attack cell, as probed (stage 2's bound reads it)
    attacks: dict[tuple[str, str, str], float | None] | None = None


def estimate_grids(
    grids: list[Grid], device: str | None, cache_dir: str | None, workers: int
) -> list[GridPart]:
    """Estimate each grid in order (their probes shared), capturing what each prints."""
    from leakshield.experiment.estimate import print_estimate
    from leakshield.experiment.probe_cache import kept_memo

    parts: list[GridPart] = []
    memo = None
    for grid in grids:
        runner = _runner(grid, device, cache_dir)
        memo = memo or kept_memo(runner.cache.root, runner.device)
        printed = io.StringIO()
        try:
            with redirect_stdout(printed):
                print(f"— {grid[0]}")
                found = print_estimate(runner, workers=workers, memo=memo)
        finally:  # each grid's probes kept as it ends: a stopped dry run resumes from them
            memo.save()
        wants = bool(found.not_estimated and found.todo)
        parts.append(GridPart(printed.getvalue(), found.seconds(workers), wants, len(found.not_estimated),
                              found.attack_seconds))  # fmt: skip
    if memo is not None and memo.kept is not None:
        parts[-1].text += f"grid {memo.kept.summary()}\n"
    return parts


def probe_grids(grids: list[Grid], device: str | None, cache_dir: str | None) -> list[dict[str, float]]:
    """The fit probe of each grid that has cells to compute (empty for a grid with nothing to fit)."""
    return probe_grids_kept(grids, device, cache_dir)[0]


def probe_grids_kept(
    grids: list[Grid], device: str | None, cache_dir: str | None
) -> tuple[list[dict[str, float]], str]:
    """:func:`probe_grids`, and a line saying how many fit probes earlier dry runs' kept results
    spared."""
    from leakshield.experiment.estimate import cells_to_compute
    from leakshield.experiment.probe_cache import FIT_PROBES, kept_probes
    from leakshield.leaderboard.fit_probe import probe_fits

    found: list[dict[str, float]] = []
    kept = None
    for grid in grids:
        runner = _runner(grid, device, cache_dir)
        kept = kept or kept_probes(runner.cache.root, FIT_PROBES, runner.device)
        try:
            found.append(probe_fits(runner.config, runner.device, kept) if cells_to_compute(runner) else {})
        finally:
            kept.save()
    return found, "" if kept is None or not (kept.probed or kept.reused) else f"fit {kept.summary()}\n"


def _runner(grid: Grid, device: str | None, cache_dir: str | None) -> ExperimentRunner:
    """The (not started) runner of ``grid``, as either process builds it from the grid's JSON."""
    from leakshield.experiment import ExperimentRunner
    from leakshield.experiment.config import parse_config

    title, config_json, where = grid
    config = parse_config(json.loads(config_json), source=title)
    return ExperimentRunner(config, Path(where), device=device, progress=False, cache_dir=cache_dir)


def stage_two_bound(
    config: Any, attacks: dict[tuple[str, str, str], float | None], victims: int
) -> tuple[int, float]:
    """(reruns, seconds) of stage 2 for a ranked grid, bounded above: per row and threat table, its most
    expensive attack cell as probed, scaled to ``victims`` victims linearly (attacks with a fixed cost per
    cell scale less) on every seed; cells not probed (already stored) count 0."""
    from leakshield.attacks import ATTACKS
    from leakshield.experiment.cells import runs_against
    from leakshield.threats import Adversary

    reruns, seconds = 0, 0.0
    for model in config.models:
        for defense in config.defenses:
            tables: dict[tuple[str, bool], float] = {}
            for attack in config.attacks:
                threat = ATTACKS.get(attack.name).threat
                if not runs_against(attack, defense) or threat.adversary is Adversary.PARTICIPANT:
                    continue
                for (name, label, scale), each in attacks.items():
                    if name != model.display or label != attack.display:
                        continue
                    clients = next((int(p[8:]) for p in scale.split() if p.startswith("clients=")),
                                   config.fl.aggregate_size)  # fmt: skip
                    table = (threat.who, bool(config.fl.secure_aggregation) and clients > 1)
                    tables[table] = max(tables.get(table, 0.0), each or 0.0)
            reruns += len(tables)
            seconds += sum(tables.values()) * victims / config.victims.count * len(config.seeds)
    return reruns, seconds


def dry_run(
    grids: list[tuple[str, Any, Path]],
    device: str | None,
    cache_dir: str | None,
    workers: int,
    stage_two: tuple[int, list[bool]] | None = None,
) -> float:
    """Print each grid's estimate and the probed fits, and stage 2's bound (``stage_two``: its fresh
    victims per seed and which grids are ranked); returns the leaderboard's total seconds."""
    jobs = [(title, json.dumps(config.model_dump(mode="json")), str(where)) for title, config, where in grids]
    side = " side by side" if workers > 1 else ""
    print(f"probing {len(grids)} grid(s) and their fits{side}; the tables follow when done…", flush=True)
    if workers > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(
            max_workers=2, mp_context=get_context("spawn"), initializer=init_single_threaded_worker
        ) as pool:
            estimating = pool.submit(estimate_grids, jobs, device, cache_dir, workers)
            probing = pool.submit(probe_grids_kept, jobs, device, cache_dir)
            try:
                parts, (probes, fits_kept) = estimating.result(), probing.result()
            except KeyboardInterrupt:  # Ctrl-C: stop the probes now (the workers ignore it)
                stop_workers(pool)
                raise
    else:
        parts = estimate_grids(jobs, device, cache_dir, workers)
        probes, fits_kept = probe_grids_kept(jobs, device, cache_dir)
    total, missing = 0.0, 0
    for part, probed in zip(parts, probes, strict=True):
        print(part.text, end="")
        total += part.seconds
        if part.wants_fits:  # the kinds it left out, probed at short budgets
            for label, seconds in probed.items():
                print(f"  probed: {label}: {seconds / 60:.1f} min")
            total += sum(probed.values()) / max(workers, 1)
            missing += 0 if probed else part.not_estimated
    if stage_two is not None and stage_two[0] > 0:
        victims, ranked = stage_two
        reruns, seconds = 0, 0.0
        for (_, config, _), part, counted in zip(grids, parts, ranked, strict=True):
            if counted:
                found = stage_two_bound(config, part.attacks or {}, victims)
                reruns, seconds = reruns + found[0], seconds + found[1]
        print(f"— stage 2: at most {reruns} chosen cell(s) rerun on {victims} fresh victims per seed, "
              f"≤ {seconds / max(workers, 1) / 60:.1f} min (each row's costliest probed attack, scaled "
              "linearly in victims)")  # fmt: skip
        total += seconds / max(workers, 1)
    print(fits_kept, end="")
    note = f" ({missing} kind(s) not estimated, listed above)" if missing else ""
    print(f"leaderboard total: {total / 60:.1f} min with {workers} worker(s){note}")
    return total
