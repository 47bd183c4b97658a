"""Every (row, seed) of a membership config, kept as it finishes (a rerun resumes), with a progress
bar; and a time estimate from one probe seed before any long work."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from tqdm.auto import tqdm

from leakshield.artifacts import ArtifactCache
from leakshield.membership.config import MembershipConfig, MembershipRow
from leakshield.membership.kept import kept_run
from leakshield.membership.run import SeedRun, run_seed


def run_grid(
    config: MembershipConfig, out: Path, *, device: str = "cpu", progress: bool = True,
    say: Callable[[str], None] = print, cache: ArtifactCache | None = None,
    counts: dict[str, int] | None = None,
) -> dict[str, list[SeedRun]]:  # fmt: skip
    """Run (or reuse from ``out/runs``) every row on every seed; returns each row's runs by seed
    (``counts``, when given, receives ``runs`` and ``reused``)."""
    folder = Path(out) / "runs"
    found: dict[str, list[SeedRun]] = {}
    jobs = [(row, seed) for row in config.rows for seed in config.seeds]
    reused = 0
    started = time.perf_counter()
    for row, seed in tqdm(jobs, desc="membership", disable=not progress, leave=False):

        def compute(r: MembershipRow = row, s: int = seed) -> SeedRun:
            return run_seed(config, r, s, cache=cache, device=device)

        run, kept = kept_run(folder, config, row, seed, compute, device)
        reused += kept
        found.setdefault(row.label, []).append(run)
    seconds = time.perf_counter() - started
    if counts is not None:
        counts.update(runs=len(jobs), reused=reused)
    say(f"membership: {len(jobs)} runs ({reused} reused from {folder}) in {seconds:.0f} s")
    return found


def estimate_seconds(
    config: MembershipConfig, *, device: str = "cpu", cache: ArtifactCache | None = None
) -> float:
    """Wall seconds the whole grid would take here. Each row is probed on the first seed for one round
    and for two (fits cached by the first probe): the difference is a round's cost, the rest the seed's
    fixed cost (data, fits, accuracy, scoring); the estimate is (fixed + rounds × per round) × seeds,
    every round counted as observed (an upper bound where ``observe_every`` > 1)."""
    total = 0.0
    for row in config.rows:
        times = []
        for rounds in (1, 2):
            probe = config.model_copy(update={"rounds": rounds, "attack_rounds": None, "observe_every": 1})
            times.append(run_seed(probe, row, config.seeds[0], cache=cache, device=device).seconds)
        per_round = max(times[1] - times[0], 0.0)
        fixed = max(times[0] - per_round, 0.0)
        total += (fixed + per_round * config.rounds) * len(config.seeds)
    return total
