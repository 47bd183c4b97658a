"""One cell, computed: a pure function of the run's world and the cell, shared by the in-process runner
and the worker processes (``--workers``, Ray). It writes nothing; the driver stores the record."""

from __future__ import annotations

import time
import traceback

import torch

from leakshield import __version__
from leakshield.errors import is_storage_problem
from leakshield.experiment.cells import Cell
from leakshield.experiment.evaluation import CellOutput
from leakshield.experiment.pipeline import cell_threat, run_cell
from leakshield.experiment.store import CellRecord
from leakshield.experiment.world import ExperimentContext
from leakshield.image_grid import image_grid, png_bytes
from leakshield.matmul_precision import precision_in_force
from leakshield.provenance import source_hash


def environment(device: torch.device) -> dict[str, object]:
    """What a cell's float results may depend on beyond config and seed (reduction order)."""
    return {
        "leakshield": __version__,
        "source": source_hash(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": str(device),
        "matmul_precision": precision_in_force(),
    }


def compute_cell(world: ExperimentContext, cell: Cell) -> CellRecord:
    """Compute one cell; its image grid travels in the record (the caller writes it). A failing cell is
    a record with status ``failed`` and its error, never an exception."""
    start = time.time()
    status, error, output, png, threat = "ok", None, CellOutput({}, []), None, None
    try:
        declared = cell_threat(world.config, cell)
        threat = None if declared is None else declared.as_json()
        if threat is not None and world.config.fl.secure_aggregation:  # the protocol the cell ran under
            threat["aggregated"] = True
            # the configured size decides the cell's table, never what its guards let through
            configured = cell.scale.clients if cell.scale else None
            threat["aggregate_size"] = configured or world.config.fl.aggregate_size
        output = run_cell(world, cell, declared)
        if output.grid_rows:
            png = png_bytes(image_grid(output.grid_rows))
    except (Exception, torch.OutOfMemoryError) as exc:  # a failing cell must not stop the grid
        if is_storage_problem(exc):  # a full or read-only disk: stop, a rerun resumes (not a failed cell)
            raise
        status = "failed"
        error = f"{type(exc).__name__}: {exc}"
        output = CellOutput({}, [{"traceback": traceback.format_exc(limit=4)}])
    return cell_record(cell, output, status=status, error=error, png=png, start=start,
                       environment=environment(world.device), threat=threat)  # fmt: skip


def cell_record(
    cell: Cell,
    output: CellOutput,
    *,
    status: str,
    error: str | None,
    png: bytes | None,
    start: float,
    environment: dict[str, object],
    threat: dict | None,
) -> CellRecord:
    """The stored form of a computed cell (the runner's and the update auditor's one recorder): its
    coordinates, the attack's registered name and threat model, metrics, rows, image and timing."""
    coords = cell.coordinates
    return CellRecord(
        key=cell.key,
        kind=cell.kind,
        model=coords["model"],  # type: ignore[arg-type]
        defense=coords["defense"],  # type: ignore[arg-type]
        attack=coords["attack"],  # type: ignore[arg-type]
        round=cell.round,
        seed=cell.seed,
        status=status,
        metrics=output.metrics,
        victims=output.victims,
        error=error,
        images=f"images/{cell.slug}.png" if png is not None else None,
        seconds=time.time() - start,
        finished=time.time(),
        environment=environment,
        image_png=png,
        attack_name=cell.attack.name if cell.attack else None,
        threat=threat,
        scale=cell.scale.label if cell.scale else None,
    )
