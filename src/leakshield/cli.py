"""The ``leakshield`` command line: run, fit, report, list, demo, ats (``cli_ats``), leaderboard
(``cli_leaderboard``).

Bad input (unknown names, wrong types, invalid values, missing data files, unreadable configs) ends
with exit status 2 and one line on stderr, without a traceback and without writing over a run.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from leakshield import (
    __version__,
    cli_ats,
    cli_audit,
    cli_crossdevice,
    cli_dpaudit,
    cli_fetch,
    cli_leaderboard,
    cli_membership,
    cli_text,
)
from leakshield.cli_common import (
    EXIT_USAGE,
    OneLineParser,
    add_common_options,
    add_stop_after,
    available_cores,  # noqa: F401  (its path in 0.2)
    config_to_print,
    positive_int,
    run_grid,
    set_threads,
)
from leakshield.cli_list import LISTABLE, cmd_list
from leakshield.errors import LeakshieldError, storage_error
from leakshield.experiment.yaml_files import parse_yaml
from leakshield.registry import component_entry


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="leakshield",
        description="Measure how much a federated-learning setup leaks its clients' training images "
        "through gradient-inversion attacks, and which defense buys the most privacy for the least "
        "accuracy.",
        epilog="Start with 'leakshield demo', then copy its config ('leakshield demo --print-config') "
        "and edit it. 'leakshield list attacks -v' shows every attack with its parameters.",
    )
    parser.add_argument("--version", action="version", version=f"leakshield {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)

    run = sub.add_parser(
        "run",
        help="run an experiment grid from a YAML config (resumes an interrupted run)",
        description="Run every cell (model × defense × attack × round × seed) of CONFIG that is not yet "
        "stored in --out, then write the report. Rerunning an interrupted run computes only the missing "
        "cells; a finished run is left as it is. An --out holding a different config is refused.",
    )
    run.add_argument("config", type=Path, help="experiment config (YAML)")
    run.add_argument("--out", type=Path, default=None, help="run directory (default: runs/<config name>)")
    run.add_argument(
        "--data-root",
        type=Path,
        default=None,
        help="folder with the dataset's files (overrides dataset.root)",
    )
    run.add_argument(
        "--corpus",
        type=Path,
        default=None,
        help="text grids (track: text): the corpus file, overriding corpus.path",
    )
    run.add_argument("--retry-failed", action="store_true", help="recompute cells stored as failed")
    run.add_argument(
        "--repair",
        action="store_true",
        help="if results.sqlite is damaged: move it aside, keep every readable finished cell and "
        "recompute the rest",
    )
    run.add_argument("--no-report", action="store_true", help="do not write the report afterwards")
    run.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        metavar="N",
        help="run independent cells in N single-threaded worker processes (one per core; cells of one "
        "model × defense × seed stay together to share their FL training). Default: 1, in-process",
    )
    run.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="local: this machine (default); ray: Ray tasks, one CPU each (pip install 'leakshield[ray]')",
    )
    run.add_argument(
        "--address",
        default=None,
        help="with --executor ray: the cluster's address (default: start a local Ray instance)",
    )
    add_stop_after(run)
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="print the cells still to compute and an estimated time per kind of cell (measured on a "
        "short probe of each kind), then stop",
    )
    add_common_options(run)

    fit = sub.add_parser(
        "fit",
        help="precompute the fitted artifacts a config needs (policy searches, public models, ...)",
        description="Fit every defense and attack of CONFIG that needs one-off preparation, for every "
        "seed and model of its grid, and store the artifacts in the cache folder (content-addressed: "
        "a later 'leakshield run' of the same settings reuses them; a corrupt artifact is detected and "
        "recomputed). Public fits see the public split only, client fits one client's data only.",
    )
    fit.add_argument("config", type=Path, help="experiment config (YAML)")
    fit.add_argument(
        "--data-root",
        type=Path,
        default=None,
        help="folder with the dataset's files (overrides dataset.root)",
    )
    add_common_options(fit)

    report = sub.add_parser(
        "report",
        help="write results.csv, table.md and report.html for a run",
        description="Build the report of RUN_DIR from its stored cells.",
    )
    report.add_argument("run_dir", type=Path, help="a run directory written by 'leakshield run'")
    report.add_argument("--quiet", action="store_true", help="print only where the files are, not the table")

    lister = sub.add_parser(
        "list",
        help=f"list the registered {', '.join(LISTABLE)}",
        description="List what leakshield provides, with paper references.",
    )
    lister.add_argument("what", metavar="WHAT", help=" | ".join(LISTABLE))
    lister.add_argument("-v", "--verbose", action="store_true", help="also show each one's parameters")

    demo = sub.add_parser(
        "demo",
        help="run the built-in demo on the embedded digits and write an HTML report",
        description="Attack an untrained LeNet on the embedded handwritten digits with iDLG and "
        "Inverting Gradients, train it with FedAvg for the utility column, and write an HTML report "
        "(about 2 minutes on 2 CPU cores, measured: 132 s).",
    )
    demo.add_argument(
        "--out",
        type=Path,
        default=None,
        help="run directory (default: runs/demo, or runs/demo-quick with --quick)",
    )
    demo.add_argument(
        "--quick",
        action="store_true",
        help="a smoke test in well under a minute: 2 victims, shortened attacks, 3 FL rounds (with --text: "
        "2 victims of one review, 30 TAG steps, 2 FL rounds on 600 training reviews)",
    )
    demo.add_argument("--print-config", action="store_true", help="print the demo's config and exit")
    demo.add_argument(
        "--text",
        action="store_true",
        help="the text track's demo instead: what a small BERT's update leaks about Rotten Tomatoes "
        "reviews, untrained and FL-trained, undefended and noised (needs pip install 'leakshield[text]'; "
        "about 3.5 minutes on 2 CPU cores, measured: 204 s)",
    )
    demo.add_argument(
        "--corpus",
        type=Path,
        default=None,
        help="with --text: the corpus file (default: the one 'leakshield fetch-corpus' put in the cache)",
    )
    add_common_options(demo)
    cli_ats.add_parser(sub)
    cli_leaderboard.add_parser(sub)
    cli_membership.add_parser(sub)
    cli_crossdevice.add_parser(sub)
    cli_dpaudit.add_parser(sub)
    cli_fetch.add_parser(sub)
    cli_audit.add_parser(sub)
    return parser


def demo_config_text() -> str:
    return resources.files("leakshield").joinpath("configs/demo.yaml").read_text()


def _load(args: argparse.Namespace):
    from leakshield.experiment import load_config, parse_config

    config = load_config(args.config)
    if args.data_root is not None:
        data = config.model_dump(mode="json")
        data["dataset"]["root"] = str(args.data_root)
        config = parse_config(data, source=str(args.config))
    return config


def cmd_run(args: argparse.Namespace) -> int:
    from leakshield.experiment.yaml_files import read_yaml
    from leakshield.text_grid.config import is_text_config

    data = read_yaml(args.config)
    if is_text_config(data):
        if args.data_root is not None:
            raise LeakshieldError("--data-root: a text grid reads a corpus; give it with --corpus")
        return cli_text.run_text(data, str(args.config), args)
    if args.corpus is not None:
        raise LeakshieldError("--corpus: only text grids (track: text) read a corpus; use --data-root")
    config = _load(args)
    out = args.out or Path("runs") / config.name
    return run_grid(config, out, args)


def cmd_fit(args: argparse.Namespace) -> int:
    from leakshield.experiment.code_cache import CodeKeyedCache as ArtifactCache
    from leakshield.experiment.pipeline import resolve_device
    from leakshield.experiment.prefit import fit_config, needs_fitting

    config = _load(args)
    set_threads(args.threads, args.matmul_precision)
    cache = ArtifactCache(args.cache_dir)
    if not needs_fitting(config):
        print(f"{config.name}: no defense or attack of this config needs fitting; nothing to do")
        return 0
    cache.ensure_usable()
    summary = fit_config(config, resolve_device(args.device), cache, progress=not args.quiet)
    extra = f" (+{summary.intermediate} intermediate results)" if summary.intermediate else ""
    counts = f"{summary.artifacts} artifacts: {summary.fitted} fitted, {summary.reused} reused{extra}"
    print(f"{counts} → {summary.cache}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from leakshield.experiment import parse_config

    if args.text:
        return cli_text.run_text_demo(args)
    if args.corpus is not None:
        raise LeakshieldError("--corpus: only the text demo (--text) reads a corpus")
    text = demo_config_text()
    if args.print_config:
        print(config_to_print(text, quick_demo if args.quick else None, "demo config"), end="")
        return 0
    data = parse_yaml(text, "demo config")
    if args.quick:
        data = quick_demo(data)
    out = args.out or Path("runs") / data["name"]
    return run_grid(parse_config(data, source="demo config"), out, args)


def quick_demo(data: dict) -> dict:
    """The demo shrunk to a smoke test: same pipeline, 2 victims, short attacks, 3 FL rounds."""
    data = {**data, "name": f"{data['name']}-quick"}
    data["victims"] = {**data["victims"], "count": 2}
    data["utility"] = {**data["utility"], "rounds": 3}
    budgets = {"idlg": 10, "ig": 100}
    data["attacks"] = [
        {**a, "iterations": budgets.get(a["name"], 50)} for a in map(component_entry, data["attacks"])
    ]
    return data


def cmd_report(args: argparse.Namespace) -> int:
    from leakshield.report import build_report
    from leakshield.text_grid.report import is_text_run

    if is_text_run(args.run_dir):
        return cli_text.report_text(args.run_dir, args.quiet)
    files = build_report(args.run_dir)
    if not args.quiet:
        print(files.markdown.read_text(), end="")
    print(f"\nreport: {files.html}  csv: {files.csv}")
    return 0


def cmd_ats(args: argparse.Namespace) -> int:
    return cli_ats.cmd_ats(args)


#: the commands a rerun resumes
RESUMING = ("run", "leaderboard", "fit", "membership", "cross-device", "dp-audit", "audit")

COMMANDS = {
    "run": cmd_run,
    "fit": cmd_fit,
    "report": cmd_report,
    "list": cmd_list,
    "demo": cmd_demo,
    "ats": cmd_ats,
    "leaderboard": cli_leaderboard.cmd_leaderboard,
    "fetch-corpus": cli_fetch.cmd_fetch_corpus,
    "membership": cli_membership.cmd_membership,
    "cross-device": cli_crossdevice.cmd_cross_device,
    "dp-audit": cli_dpaudit.cmd_dp_audit,
    "check-dp": cli_dpaudit.cmd_check_dp,
    "audit": cli_audit.cmd_audit,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return COMMANDS[args.command](args)
    except LeakshieldError as exc:  # one line, whatever a message quoted (file contents, names)
        sys.stderr.write(f"leakshield: error: {' '.join(str(exc).split())}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("leakshield: interrupted; rerun the same command to resume\n")
        return 130
    except BrokenPipeError:  # output piped into a reader that stopped (e.g. `| head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (OSError, sqlite3.OperationalError) as exc:  # a full, read-only or misnamed target anywhere
        again = "rerun the same command once it is writable: it resumes"
        resumes = args.command in RESUMING
        problem = storage_error(exc, resume=again if resumes else "", verb="use")
        if problem is None:
            raise
        sys.stderr.write(f"leakshield: error: {' '.join(str(problem).split())}\n")
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
