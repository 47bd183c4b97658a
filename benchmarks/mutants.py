"""The mutant check: for each catalogued component, break its core step in a copy of the package (an
objective's sign, an update's direction, the noise removed, a mask inverted…), run that component's
behaviour tests against the copy, and print a table: component, mutant, killed or survived.

    python benchmarks/mutants.py                 # every mutant, two at a time (one thread each)
    python benchmarks/mutants.py --only hitaj dc # the mutants of these components
    python benchmarks/mutants.py --list          # the catalogue and the registered components it lacks

The source tree is never edited: each mutant is applied to a fresh copy of ``src/`` that its pytest
process imports first (``PYTHONPATH``). A mutant whose text no longer occurs exactly once in its file is
an error (the catalogue is stale), and the selected tests must pass on the unmutated copy first. Exit
status 1 when a mutant survived or a test failed unmutated.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from mutant_catalogue import MUTANTS, Mutant, uncovered  # noqa: E402


def copy_package(into: Path) -> Path:
    """A copy of ``src/`` under ``into``; returns its ``src`` folder."""
    src = into / "src"
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return src


def run_tests(src: Path, tests: tuple[str, ...]) -> tuple[bool, str, float]:
    """Run ``tests`` importing the package from ``src``: (passed, the first failing test, seconds)."""
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1", "LEAKSHIELD_TEST_THREADS": "1",
           "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
    start = time.perf_counter()
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not slow",
               "--no-header", "-rf", *tests]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    failed = next(
        (line.split(" ", 2)[1] for line in done.stdout.splitlines() if line.startswith("FAILED ")), ""
    )
    if done.returncode not in (0, 1):  # collection errors, usage errors: name them
        failed = failed or f"pytest exit {done.returncode}: {done.stdout.strip().splitlines()[-1:]}"
    return done.returncode == 0, failed, time.perf_counter() - start


def apply(mutant: Mutant, src: Path) -> None:
    path = src / "leakshield" / mutant.file
    text = path.read_text()
    if text.count(mutant.old) != 1:
        raise SystemExit(f"stale mutant {mutant.component}/{mutant.name}: its text occurs "
                         f"{text.count(mutant.old)} times in {mutant.file}, not once")  # fmt: skip
    path.write_text(text.replace(mutant.old, mutant.new))


def check(mutant: Mutant, workdir: Path) -> tuple[Mutant, bool, str, float]:
    folder = Path(tempfile.mkdtemp(dir=workdir))
    src = copy_package(folder)
    apply(mutant, src)
    passed, failed, seconds = run_tests(src, mutant.tests)
    shutil.rmtree(folder)
    return mutant, not passed, failed, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="components whose mutants to run")
    parser.add_argument("--jobs", type=int, default=2, help="mutants at a time (one thread each)")
    parser.add_argument("--list", action="store_true", help="print the catalogue and exit")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if args.only is None or m.component in args.only]
    if args.list or not chosen:
        for m in MUTANTS:
            print(f"{m.kind:<9} {m.component:<20} {m.name}")
        missing = uncovered()
        print(f"{len(MUTANTS)} mutants; registered components without one ({len(missing)}): "
              f"{', '.join(missing) or 'none'}")  # fmt: skip
        return 0
    with tempfile.TemporaryDirectory(prefix="mutants-") as tmp:
        workdir = Path(tmp)
        for m in chosen:  # every mutant's text is where the catalogue says, before anything runs
            apply(m, copy_package(Path(tempfile.mkdtemp(dir=workdir))))
        tests = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
        clean = Path(tempfile.mkdtemp(dir=workdir))
        passed, failed, seconds = run_tests(copy_package(clean), tests)
        print(f"unmutated: {len(tests)} test selections {'pass' if passed else 'FAIL at ' + failed} "
              f"({seconds:.0f} s)", flush=True)  # fmt: skip
        if not passed:
            return 1
        print("| kind | component | mutant | result | killed by | s |\n|---|---|---|---|---|---|", flush=True)
        survivors = 0
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for mutant, killed, by, seconds in pool.map(lambda m: check(m, workdir), chosen):
                survivors += not killed
                result = "killed" if killed else "**SURVIVED**"
                cells = [mutant.kind, mutant.component, mutant.name, result, by, f"{seconds:.0f}"]
                print("| " + " | ".join(cells) + " |", flush=True)
    print(f"{len(chosen)} mutants, {len(chosen) - survivors} killed, {survivors} survived")
    missing = uncovered()
    if args.only is None and missing:
        print(f"registered components without a mutant ({len(missing)}): {', '.join(missing)}")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
