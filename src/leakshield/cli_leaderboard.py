"""``leakshield leaderboard``: every defense against every attack under one protocol
(``configs/leaderboard.yaml``), run as resumable grids (the main grid and the preset's realism
scenarios), then ranked per threat model by each defense's strongest attack."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from leakshield.cli_common import (
    STOPPED,
    add_common_options,
    add_stop_after,
    past_deadline,
    run_grid,
    set_threads,
)
from leakshield.errors import LeakshieldError


def add_parser(sub: Any) -> None:
    board = sub.add_parser(
        "leaderboard",
        help="every defense against every attack, one protocol: a ranked table and frontier",
        description="Run the leaderboard grid (configs/leaderboard.yaml: the same victims, model states, "
        "attack budgets and metric conventions for every defense; generic, adaptive, malicious-server "
        "and malicious-client attacks) and write leaderboard.html: per threat model, each defense "
        "compared with no defense under the strongest attack run against it (stage 1 chooses that attack "
        "on every seed; stage 2 reruns it on fresh victims per seed, in <out>/stage2), with letters from "
        "all-pairs tests, the privacy–utility frontier and a page per defense. Interrupted runs resume: "
        "rerun the same command.",
        epilog="Examples:\n  leakshield leaderboard --preset quick --workers 2\n"
        "  leakshield leaderboard --preset full --data-root ~/data/cifar-10-batches-bin\n"
        "  leakshield leaderboard --preset quick --workers 2 --readme README.md\n"
        "  leakshield leaderboard --check README.md   # stale rows and why; the block against its export\n"
        "  leakshield leaderboard --from-export docs/leaderboard/standard.json --readme README.md",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    board.add_argument(
        "--preset",
        default="quick",
        help="quick (smoke: 2 seeds, small budgets), standard (8 seeds, realism scenarios; the README's "
        "Results), full (the papers' budgets; a GPU) or gpu (ResNet-18 on CIFAR-10 photographs for one "
        "short GPU command; --data-root its .npz). Measured times: docs/leaderboard.md",
    )
    board.add_argument(
        "--config", type=Path, default=None, help="a leaderboard file (default: the shipped one)"
    )
    board.add_argument(
        "--data-root",
        type=Path,
        default=None,
        help="folder of CIFAR-10's binary version (data_batch_1.bin … test_batch.bin, as in "
        "'cifar-10-batches-bin'): the same protocol on it; with --preset gpu, its .npz (or its folder)",
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
    board.add_argument(
        "--tune",
        action="store_true",
        help="run the learning-rate sweep instead (each defense's paper optimizer, accuracy on the public "
        "split) and print the 'training' section it selects",
    )
    board.add_argument(
        "--check",
        type=Path,
        default=None,
        metavar="README",
        help="say which rows of README's Results this code and the leaderboard file (the shipped one, or "
        "--config's) would compute differently (stale, and why), and whether every line of the block is "
        "what its export renders; exit 0 only when all is fresh and the block faithful, then stop",
    )
    board.add_argument(
        "--from-export",
        type=Path,
        default=None,
        metavar="EXPORT",
        help="with --readme: rewrite the README's Results block from a stored export (e.g. "
        "docs/leaderboard/standard.json), stale rows marked, without running a cell",
    )
    board.add_argument(
        "--corpus",
        type=Path,
        default=None,
        help="the text section's corpus (the Rotten Tomatoes CSV; default: the one 'leakshield "
        "fetch-corpus' cached); without it, or without the text extra, the text section is skipped",
    )
    board.add_argument("--retry-failed", action="store_true", help="recompute cells stored as failed")
    add_stop_after(board)
    add_common_options(board)


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from leakshield.experiment.compatibility import check_grids_fit_models
    from leakshield.leaderboard.presets import load_leaderboard, load_scenarios
    from leakshield.leaderboard.report import build_leaderboard

    refuse_option_clashes(args)
    if args.check is not None:
        return _check(args.check, args)
    if args.readme is not None:  # say so now, not after the whole run
        need_file(args.readme, "--readme", "the README whose Results to rewrite")
    if args.from_export is not None:
        return _from_export(args.from_export, args.readme, args)
    if args.readme is not None:
        writable_outputs(args.readme, args.preset)
    config = load_leaderboard(args.preset, path=args.config, data_root=args.data_root)
    out = args.out or Path("runs") / config.name
    if args.tune:
        return _tune(config, out, args)
    scenarios = load_scenarios(args.preset, path=args.config, data_root=args.data_root)
    if args.dry_run:
        return _dry_run(config, out, scenarios, args)
    check_grids_fit_models([config, *(c for _, c, _ in scenarios)])  # a scenario's too, before any grid
    from leakshield.leaderboard.presets import load_text_leaderboard

    text = load_text_leaderboard(args.preset, path=args.config, corpus=args.corpus)  # its errors first
    status = run_grid(config, out, args)
    for name, scenario, _ in scenarios:
        if status == STOPPED or past_deadline(args):
            return STOPPED  # the leaderboard is built by the rerun that completes every grid
        print(f"scenario {name}:")
        status = max(status, run_grid(scenario, out / "scenarios" / name, args))
    if status == STOPPED or past_deadline(args):
        return STOPPED
    status = max(status, _stage_two(config, scenarios, out, args))
    if status == STOPPED or past_deadline(args):
        return STOPPED
    status = max(status, _text_section(text, out, args))
    files = build_leaderboard(out, preset=args.preset, scenarios=[(n, a) for n, _, a in scenarios])
    print(f"leaderboard: {files.html}  ({len(files.pages)} defense pages)  table: {files.markdown}")
    if args.readme is not None:
        from leakshield.experiment.store import atomic_write_bytes
        from leakshield.leaderboard.export_schema import read_export
        from leakshield.leaderboard.readme_markers import marker_span, read_readme

        read_export(files.json, "")  # the run's export and the README's markers, before anything is replaced
        marker_span(read_readme(args.readme), args.readme)
        export = args.readme.parent / "docs" / "leaderboard" / f"{args.preset}.json"
        atomic_write_bytes(export, files.json.read_bytes())  # the published one whole, or as it was
        _from_export(export, args.readme, args)
    return status


def _stage_two(config: Any, scenarios: list, out: Path, args: argparse.Namespace) -> int:
    """Rerun each row's chosen cell on fresh victims per seed (:mod:`leakshield.leaderboard.stage_two`),
    each into ``out/stage2/<name>`` (resumable): with ``--workers`` N, N reruns at a time in N
    single-threaded processes that stay up between reruns; 1 when a cell failed."""
    import json

    from leakshield.experiment.rundir import STORE_FILE
    from leakshield.experiment.store import ResultStore
    from leakshield.leaderboard.presets import load_stage_two_victims
    from leakshield.leaderboard.report import load_scenarios_of
    from leakshield.leaderboard.stage_two import FOLDER, chosen_cells, rerun_config, run_reruns, write_index

    count = load_stage_two_victims(args.preset, path=args.config)
    if count == 0 or not config.victims.per_seed:
        write_index(out, [])
        why = "stage2.victims: 0" if count == 0 else "victims.per_seed is off: fresh victims could repeat"
        print(f"stage 2: off ({why}); each row shows the victims its attack was chosen on")
        return 0
    records = ResultStore(out / STORE_FILE).records()
    found = load_scenarios_of(out, [(n, a) for n, _, a in scenarios])
    configs = {None: config, **{n: c for n, c, _ in scenarios}}
    reruns = chosen_cells(records, found, configs, count)
    write_index(out, reruns)
    print(f"stage 2: {len(reruns)} chosen cell(s), each rerun on {count} fresh victims per seed")
    cache = None if args.cache_dir is None else str(args.cache_dir)
    grids = [rerun_config(configs[r.source], r).model_dump(mode="json") for r in reruns]
    jobs = [(json.dumps(grid), str(out / FOLDER / r.name), args.device, cache, args.matmul_precision)
            for grid, r in zip(grids, reruns, strict=True)]  # fmt: skip
    if args.workers <= 1:
        set_threads(args.threads, args.matmul_precision)
    results, stopped = run_reruns(jobs, args.workers, progress=not args.quiet,
                                  keep_going=lambda: not past_deadline(args))  # fmt: skip
    computed, failed = sum(r[0] for r in results), sum(r[2] for r in results)
    print(f"stage 2: {computed} cells computed, {failed} failed → {out / FOLDER}")
    if stopped:
        return STOPPED
    return 1 if failed else 0


def text_unavailable(config: Any) -> str | None:
    """Why the text section cannot run here (the text extra or the corpus missing), or None."""
    from leakshield.text.extra import missing_text_extra
    from leakshield.text.fetch import default_corpus_path

    missing = missing_text_extra()
    if missing:
        return f"the text extra is not installed ({', '.join(missing)}: pip install 'leakshield[text]')"
    path = Path(config.corpus.path).expanduser() if config.corpus.path else default_corpus_path()
    found = path.exists() if config.corpus.format == "rt-polarity" else path.is_file()  # a folder, a file
    if not found:
        return f"no corpus at {path} (give --corpus FILE, or run 'leakshield fetch-corpus')"
    return None


def _text_section(config: Any, out: Path, args: argparse.Namespace) -> int:
    """Run the preset's text grid ``config`` into ``out/text`` in-process (resumable); 1 when a cell or
    the grid failed (said in one line: the image leaderboard is still built), 0 when the preset has none
    or it cannot run here (said in one line)."""
    if config is None:
        return 0
    reason = text_unavailable(config)
    if reason is not None:
        print(f"text section skipped: {reason}")
        return 0
    from leakshield.text_grid.runner import TextGridRunner

    print("text section:")
    set_threads(args.threads, args.matmul_precision)
    runner = TextGridRunner(
        config, out / "text", device=args.device, progress=not args.quiet, cache_dir=args.cache_dir
    )
    try:
        summary = runner.run(retry_failed=args.retry_failed)
    except Exception as exc:  # the image leaderboard is built whatever the text section does
        print(f"text section failed: {type(exc).__name__}: {exc}")
        return 1
    from leakshield.text_grid.report import build_text_report

    build_text_report(out / "text")
    print(f"text: {summary.computed} cells computed, {summary.skipped} already stored, {summary.failed} "
          f"failed → {summary.out}")  # fmt: skip
    return 1 if summary.failed else 0


def _protocol(args: argparse.Namespace) -> Any:
    from leakshield.leaderboard.published import Protocol

    return Protocol(args.config, args.data_root)


def _from_export(export: Path, readme: Path | None, args: argparse.Namespace) -> int:
    from leakshield.leaderboard.published import rerender

    if readme is None:
        raise LeakshieldError("--from-export: give --readme too (the README whose Results to rewrite)")
    need_file(export, "--from-export", "an export: docs/leaderboard/<preset>.json")
    staleness = rerender(readme, export, protocol=_protocol(args))
    stale = f"; {len(staleness.stale)} of {staleness.cells} cells stale, their rows marked"
    print(f"README: {readme} (Results section from {export}{stale if staleness.stale else ''})")
    return 0


def _dry_run(config: Any, out: Path, scenarios: list, args: argparse.Namespace) -> int:
    from leakshield.leaderboard.dry_run import dry_run

    cli_threads(args)
    grids = [("main grid", config, out)] + [
        (f"scenario {n}", c, out / "scenarios" / n) for n, c, _ in scenarios
    ]
    cache_dir = None if args.cache_dir is None else str(args.cache_dir)
    from leakshield.leaderboard.presets import load_stage_two_victims

    ranked = [True] + [bool(about.get("ranked")) for _, _, about in scenarios]
    victims = load_stage_two_victims(args.preset, path=args.config)
    dry_run(grids, args.device, cache_dir, args.workers, (victims, ranked))
    from leakshield.leaderboard.presets import load_text_leaderboard

    text = load_text_leaderboard(args.preset, path=args.config, corpus=args.corpus)
    if text is not None:
        from leakshield.text_grid.cells import expand_text_grid

        reason = text_unavailable(text)
        skipped = f"; skipped here: {reason}" if reason else ""
        print(f"text section: {len(expand_text_grid(text))} cells in-process after the grids, not "
              f"estimated (measured times: docs/leaderboard.md){skipped}")  # fmt: skip
    return 0


def cli_threads(args: argparse.Namespace) -> None:
    """Probe at the thread count the cells will run with (``--workers`` > 1: single-threaded workers)."""
    set_threads(args.threads or (1 if args.workers > 1 else None), args.matmul_precision)


def _tune(config: Any, out: Path, args: argparse.Namespace) -> int:
    from leakshield.experiment.rundir import STORE_FILE
    from leakshield.experiment.store import ResultStore
    from leakshield.leaderboard.tuning import tuning_config, write_tuning

    sweep = tuning_config(config)
    where = out.parent / f"{out.name}-tuning"
    status = run_grid(sweep, where, args)
    if args.dry_run or status == STOPPED:  # a sweep not finished selects nothing
        return status
    path, text = write_tuning(where, sweep, ResultStore(where / STORE_FILE).records())
    print(f"selected on the public split ({path}); keep in the leaderboard file:\n{text}")
    return status


def refuse_option_clashes(args: argparse.Namespace) -> None:
    """One line for options that cannot go together (one of them would be ignored)."""
    given = {"--check": args.check is not None, "--from-export": args.from_export is not None,
             "--readme": args.readme is not None, "--tune": args.tune, "--dry-run": args.dry_run}  # fmt: skip
    clashes = [("--check", other) for other in ("--from-export", "--readme", "--tune", "--dry-run")]
    clashes += [("--from-export", "--tune"), ("--from-export", "--dry-run"), ("--tune", "--readme")]
    for first, second in clashes:
        if given[first] and given[second]:
            raise LeakshieldError(f"give {first} or {second}, not both (see 'leakshield leaderboard --help')")


def need_file(path: Path, option: str, what: str) -> None:
    """Refuse ``path`` unless it is a file, saying what it is instead (a folder, nothing)."""
    if path.is_dir():
        raise LeakshieldError(f"{option} {path}: a folder; give a file ({what})")
    if not path.is_file():
        raise LeakshieldError(f"{option} {path}: no such file ({what})")


def writable_outputs(readme: Path, preset: str) -> None:
    """Before the run: the export and the results page ``--readme`` writes beside the README
    (``docs/leaderboard/<preset>.json`` and ``.md``) must be writable as files."""
    export = readme.parent / "docs" / "leaderboard" / f"{preset}.json"
    for target in (export, export.with_suffix(".md")):
        if target.is_dir():
            raise LeakshieldError(f"--readme {readme}: {target} is a folder; the run writes a file there")
        for parent in reversed(target.parents):
            if parent.exists() and not parent.is_dir():
                raise LeakshieldError(
                    f"--readme {readme}: {parent} is a file; the run writes {target} under it"
                )
        existing = next(p for p in [target, *target.parents] if p.exists())
        if not os.access(existing, os.W_OK):
            raise LeakshieldError(f"--readme {readme}: {existing} is not writable; the run writes {target}")
    if not os.access(readme, os.W_OK):
        raise LeakshieldError(f"--readme {readme}: not writable; the run rewrites its Results block")
    from leakshield.leaderboard.readme_markers import marker_span, read_readme

    marker_span(read_readme(readme), f"--readme {readme}")  # broken markers: before the run


def _check(readme: Path, args: argparse.Namespace) -> int:
    from leakshield.leaderboard.published import check

    need_file(readme, "--check", "the README whose Results to check")

    verdict = check(readme, protocol=_protocol(args))
    print("\n".join(verdict.lines))
    return 0 if verdict.fresh else 1
