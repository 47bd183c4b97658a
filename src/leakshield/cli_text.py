"""The text track's commands: ``leakshield run`` on a config with ``track: text``, ``leakshield demo
--text`` and ``leakshield report`` of a text run (:mod:`leakshield.text_grid`)."""

from __future__ import annotations

import argparse
from importlib import resources
from pathlib import Path
from typing import Any

from leakshield.cli_common import config_to_print, set_threads
from leakshield.errors import LeakshieldError
from leakshield.experiment.yaml_files import parse_yaml
from leakshield.registry import component_entry
from leakshield.text.extra import EXTRA_MODULES, text_extra

#: ``leakshield run`` options of image grids, with their defaults (a text grid runs in-process)
GRID_ONLY = {"workers": 1, "executor": "local", "dry_run": False, "repair": False, "stop_after": None}


def text_demo_config() -> str:
    return resources.files("leakshield").joinpath("configs/text-demo.yaml").read_text()


def quick_text_demo(data: dict[str, Any]) -> dict[str, Any]:
    """The text demo shrunk to a smoke test: 2 victims at batch 1, 30 TAG steps, 2 FL rounds on 600
    training texts."""
    data = {**data, "name": f"{data['name']}-quick"}
    data["victims"] = {**data.get("victims", {}), "count": 2, "batches": [1]}
    data["training"] = {**data.get("training", {}), "rounds": 2}
    data["corpus"] = {**data.get("corpus", {}), "max_train": 600}
    data["attacks"] = [a if component_entry(a)["name"] != "tag" else {**component_entry(a), "iterations": 30}
                       for a in data["attacks"]]  # fmt: skip
    return data


def run_text(data: dict[str, Any], source: str, args: argparse.Namespace) -> int:
    """Validate a text config, run its grid into ``--out`` (default runs/<name>), print its table and
    write its report; 1 when a cell failed."""
    for module in EXTRA_MODULES:
        text_extra(module)
    from leakshield.text_grid.config import parse_text_config
    from leakshield.text_grid.report import build_text_report, markdown_table
    from leakshield.text_grid.runner import TextGridRunner

    config = parse_text_config(with_corpus(data, getattr(args, "corpus", None)), source=source)
    for flag, default in GRID_ONLY.items():
        if getattr(args, flag, default) != default:
            raise LeakshieldError(
                f"--{flag.replace('_', '-')}: not available for text grids (they run in-process)"
            )
    set_threads(args.threads, args.matmul_precision)
    out = args.out or Path("runs") / config.name
    runner = TextGridRunner(
        config, out, device=args.device, progress=not args.quiet, cache_dir=args.cache_dir
    )
    summary = runner.run(retry_failed=getattr(args, "retry_failed", False))
    print(f"{summary.computed} cells computed, {summary.skipped} already stored, {summary.failed} failed "
          f"→ {summary.out}")  # fmt: skip
    if not getattr(args, "no_report", False):
        from leakshield.experiment.store import ResultStore

        files = build_text_report(out)
        if not args.quiet:
            print(
                markdown_table(ResultStore(out / "results.sqlite").records(), config.model_dump(mode="json"))
            )
        print(f"report: {files.html}  markdown: {files.markdown}")
    return 1 if summary.failed else 0


def with_corpus(data: dict[str, Any], corpus: Path | None) -> dict[str, Any]:
    """``data`` reading its corpus from ``--corpus`` where one is given."""
    if corpus is None:
        return data
    return {**data, "corpus": {**(data.get("corpus") or {}), "path": str(corpus)}}


def run_text_demo(args: argparse.Namespace) -> int:
    text = text_demo_config()
    if args.print_config:  # the config as the options change it: what this command would run

        def changed(data: dict[str, Any]) -> dict[str, Any]:
            return with_corpus(quick_text_demo(data) if args.quick else data, args.corpus)

        shrink = changed if args.quick or args.corpus is not None else None
        print(config_to_print(text, shrink, "text demo config"), end="")
        return 0
    data = parse_yaml(text, "text demo config")
    if args.quick:
        data = quick_text_demo(data)
    return run_text(data, "text demo config", args)


def report_text(run_dir: Path, quiet: bool) -> int:
    from leakshield.text_grid.report import build_text_report

    files = build_text_report(run_dir)
    if not quiet:
        print(files.markdown.read_text(), end="")
    print(f"\nreport: {files.html}")
    return 0
