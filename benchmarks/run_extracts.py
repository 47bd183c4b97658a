"""Finished runs' stores for the reproduction rows (``reproduction_rows.py``, ``cifar_column.py``),
read once per run directory, and their extracts: ``RUN.json``, the cells with only what the rows read,
small enough to keep beside the page so that a test recomputes its rows."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from leakshield.experiment.store import CellRecord, ResultStore

#: the metrics an extract keeps: what the rows read
KEPT_METRICS = ("accuracy", "ssim", "ssim_sensitive")
KEPT_VICTIM = ("ssim", "sensitive")
#: the run directories whose stores were read (what ``--export`` writes)
STORES_READ: list[Path] = []


@functools.cache
def _records(run: Path) -> tuple[CellRecord, ...]:
    """A finished run's stored cells, read once per run directory, from its ``results.sqlite`` or, where
    there is none, from its extract ``RUN.json`` beside it (``--export``: what the rows read)."""
    path, extract = run / "results.sqlite", run.with_name(run.name + ".json")
    if path.is_file():  # checked first: opening a missing store would create an empty one
        STORES_READ.append(run)
        seeds = json.loads((run / "config.json").read_text(encoding="utf-8"))["config"]["seeds"]
        # the cells of the run's config: a store also keeps those of an earlier config with more seeds
        return tuple(c for c in ResultStore(path).records() if c.seed is None or c.seed in seeds)
    if extract.is_file():
        cells = json.loads(extract.read_text(encoding="utf-8"))["cells"]
        blank = {"key": "", "error": None, "images": None, "seconds": 0.0, "finished": 0.0}
        return tuple(CellRecord(**blank, **cell) for cell in cells)
    raise SystemExit(f"{run}: no results.sqlite (run the config first: see this script's docstring)")


def export(run: Path, folder: Path) -> Path:
    """Write ``folder/RUN.json``: the run's cells with only what the rows read (coordinates, status, the
    :data:`KEPT_METRICS` and per victim the :data:`KEPT_VICTIM` lists), from which the rows recompute
    exactly (``--runs folder``)."""
    coordinates = ("kind", "model", "defense", "attack", "round", "seed", "status", "scale")
    cells = [
        {name: getattr(c, name) for name in coordinates}
        | {"metrics": {k: v for k, v in c.metrics.items() if k in KEPT_METRICS}}
        | {"victims": [{k: v for k, v in victim.items() if k in KEPT_VICTIM} for victim in c.victims]}
        for c in _records(run)
        if c.kind in ("attack", "baseline", "utility")
    ]
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{run.name}.json"
    out.write_text(json.dumps({"run": run.name, "cells": cells}, indent=None) + "\n", encoding="utf-8")
    return out
