"""``leakshield leaderboard``: every defense against every attack under one protocol
(``configs/leaderboard.yaml``), run as a resumable grid, then ranked by each defense's strongest attack."""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any


def add_parser(sub: Any, common: Any) -> None:
    board = sub.add_parser(
        "leaderboard",
        help="every defense against every attack, one protocol: a ranked table and frontier",
        description="Run the leaderboard grid (configs/leaderboard.yaml: the same victims, model states, "
        "attack budgets and metric conventions for every defense; generic, adaptive, malicious-server "
        "and malicious-client attacks) and write leaderboard.html: defenses ranked by their privacy "
        "under the strongest attack run against them, the privacy–utility frontier, a page per defense. "
        "Interrupted runs resume: rerun the same command.",
        epilog="Examples:\n  leakshield leaderboard --preset quick --workers 2\n"
        "  leakshield leaderboard --preset full --data-root ~/data/cifar-10-batches-bin\n"
        "  leakshield leaderboard --preset quick --workers 2 --readme README.md",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    board.add_argument(
        "--preset",
        default="quick",
        help="quick (digits; 11 min with --workers 2 on 2 cores from an empty cache, measured) or full",
    )
    board.add_argument(
        "--config", type=Path, default=None, help="a leaderboard file (default: the shipped one)"
    )
    board.add_argument(
        "--data-root",
        type=Path,
        default=None,
        help="folder of CIFAR-10's binary version (data_batch_1.bin … test_batch.bin, as in "
        "'cifar-10-batches-bin'): the same protocol on it",
    )
    board.add_argument("--out", type=Path, default=None, help="run directory (default: runs/<name>)")
    board.add_argument("--workers", type=int, default=1, help="parallel single-threaded worker processes")
    board.add_argument(
        "--readme",
        type=Path,
        default=None,
        help="rewrite this README's generated Results section from the run (and write the run's export "
        "next to it, docs/leaderboard/<preset>.json)",
    )
    board.add_argument("--dry-run", action="store_true", help="print the cells to compute and the estimate")
    board.add_argument("--retry-failed", action="store_true", help="recompute cells stored as failed")
    common(board)


def cmd_leaderboard(args: argparse.Namespace, run: Callable[..., int]) -> int:
    from leakshield.errors import LeakshieldError
    from leakshield.leaderboard.export import readme_section, records_from_json, replace_readme_section
    from leakshield.leaderboard.presets import load_leaderboard
    from leakshield.leaderboard.report import build_leaderboard

    if args.readme is not None and not args.readme.is_file():  # say so now, not after the whole run
        raise LeakshieldError(f"--readme {args.readme}: no such file (the README whose Results to rewrite)")
    config = load_leaderboard(args.preset, path=args.config, data_root=args.data_root)
    out = args.out or Path("runs") / config.name
    status = run(config, out, args)
    if args.dry_run:
        return status
    files = build_leaderboard(out, preset=args.preset)
    print(f"leaderboard: {files.html}  ({len(files.pages)} defense pages)  table: {files.markdown}")
    if args.readme is not None:
        export = args.readme.parent / "docs" / "leaderboard" / f"{args.preset}.json"
        export.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(files.json, export)
        facts, records = records_from_json(export.read_text())
        source = export.relative_to(args.readme.parent).as_posix()
        replace_readme_section(args.readme, readme_section(facts, records, source))
        print(f"README: {args.readme} (Results section from {export})")
    return status
