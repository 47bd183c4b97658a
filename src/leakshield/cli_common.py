"""What every ``leakshield`` command shares: one-line usage errors, the common options, the thread
count, and running a grid (a run directory, its estimate, its report). The command modules (``cli``,
``cli_ats``, ``cli_leaderboard``, ``cli_list``) import it; it imports none of them."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from leakshield.errors import LeakshieldError

EXIT_USAGE = 2


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (``leakshield: error: ...``) and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"leakshield: error: {message} (see '{self.prog} --help')\n")
        sys.exit(EXIT_USAGE)


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's count)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def positive_int(value: str) -> int:
    """An argparse type: an integer of at least 1."""
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def add_common_options(p: argparse.ArgumentParser) -> None:
    """The options every computing command takes: device, threads, progress, artifact cache."""
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default: auto)")
    p.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="CPU threads for torch (default: the cores available to this process)",
    )
    p.add_argument(
        "--matmul-precision",
        choices=("float32", "tf32"),
        default="float32",
        help="float32 matrix products and convolutions on a GPU: float32 (IEEE, default) or tf32 (faster on "
        "Ampere and newer cards, 10-bit mantissa; its effect is measured in docs/speed-and-scale.md); no "
        "effect on a CPU",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="folder of fitted artifacts (default: $LEAKSHIELD_CACHE_DIR, else ~/.cache/leakshield)",
    )


def set_threads(threads: int | None, matmul_precision: str = "float32") -> None:
    """torch's thread count: ``threads``, else the cores this process may use; and the precision of
    float32 products on a GPU (:mod:`leakshield.matmul_precision`)."""
    import torch

    from leakshield.matmul_precision import set_matmul_precision

    torch.set_num_threads(threads or available_cores())
    set_matmul_precision(matmul_precision)


#: the exit status of a run that stopped at its ``--stop-after`` deadline with cells left
STOPPED = 3


def minutes(value: str) -> float:
    """An argparse type: a finite number of minutes, at least 0."""
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of minutes, at least 0, got {value}")
    return number


def add_stop_after(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--stop-after",
        type=minutes,
        default=None,
        metavar="MINUTES",
        help="start no cell (with --workers: no chain of cells) after this many minutes; the running ones "
        "finish and are stored, and the command exits with status 3 (the first cell, or the first chain per "
        "worker, always runs). Rerun the same command while it exits 3: the results are those of an "
        "uninterrupted run",
    )


def stop_at(args: argparse.Namespace) -> float | None:
    """The ``time.monotonic()`` deadline of ``--stop-after``, fixed at its first use (one deadline for
    every grid of a command, the estimate's probes included)."""
    limit = getattr(args, "stop_after", None)
    if limit is None:
        return None
    if getattr(args, "stop_at", None) is None:
        args.stop_at = time.monotonic() + 60.0 * limit
    return args.stop_at


def past_deadline(args: argparse.Namespace) -> bool:
    """Whether ``--stop-after``'s deadline has passed (a later grid of the command then starts nothing)."""
    deadline = stop_at(args)
    return deadline is not None and time.monotonic() >= deadline


def run_grid(config, out: Path, args: argparse.Namespace) -> int:
    """Run ``config``'s grid into ``out`` as ``args`` say (workers, executor, dry run, repair), print
    its summary and write its report; 1 when a cell failed."""
    from leakshield.experiment import ExperimentRunner
    from leakshield.report import build_report

    set_threads(args.threads, args.matmul_precision)
    deadline = stop_at(args)  # fixed before the estimate's probes, which count against it
    workers, cores = getattr(args, "workers", 1), available_cores()
    if workers < 1:
        raise LeakshieldError(f"--workers {workers}: must be at least 1")
    if workers > cores and getattr(args, "executor", "local") == "local":
        raise LeakshieldError(
            f"--workers {workers}: this process may use {cores} cores; at most one single-threaded worker "
            "per core (more would slow every worker down: docs/speed-and-scale.md)"
        )
    runner = ExperimentRunner(
        config, out, device=args.device, progress=not args.quiet, cache_dir=args.cache_dir
    )
    from leakshield.experiment.estimate import LONG_RUN_CELLS, cells_to_compute, print_estimate

    if getattr(args, "dry_run", False):
        print_estimate(runner, workers=args.workers)
        return 0
    long_run = not args.quiet and not getattr(args, "repair", False)
    if long_run and len(cells_to_compute(runner)) >= LONG_RUN_CELLS:  # a long run: say how long
        print_estimate(runner, workers=getattr(args, "workers", 1))
    summary = runner.run(
        retry_failed=getattr(args, "retry_failed", False),
        repair=getattr(args, "repair", False),
        workers=getattr(args, "workers", 1),
        executor=getattr(args, "executor", "local"),
        address=getattr(args, "address", None),
        stop_at=deadline,
    )
    if summary.repaired is not None:
        kept, aside = summary.repaired
        print(f"repaired: kept {kept} readable cells; the damaged store is at {aside}")
    if summary.restamped:
        print(
            f"recomputed {summary.restamped} stored cells whose code or settings changed since they were run"
        )
    print(
        f"{summary.total} cells: {summary.computed} computed, {summary.skipped} already stored, "
        f"{summary.failed} failed → {summary.out}"
    )
    if summary.stopped:
        left = summary.total - summary.skipped - summary.computed
        print(f"stopped after {args.stop_after:g} min as asked: {left} cells left; rerun the same command")
        return STOPPED
    if not getattr(args, "no_report", False):
        files = build_report(out)
        print(f"report: {files.html}  table: {files.markdown}  csv: {files.csv}")
    return 1 if summary.failed else 0


def config_to_print(text: str, shrink: Any, source: str) -> str:
    """What ``--print-config`` prints: the config ``text`` as shipped, or with the options that change it
    (``--quick``, ``--corpus``; ``shrink``: the function that applies them, None for none) the config
    that actually runs."""
    if shrink is None:
        return text
    import yaml

    from leakshield.experiment.yaml_files import parse_yaml

    data = shrink(parse_yaml(text, source))
    head = f"# the {source} with the options' changes (--quick, --corpus): the config they run\n"
    return head + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
