"""The one pipeline that every cell runs through: the run's world (data, partition,
victims, models with the defenses' model stage and fitted artifacts) → the cell's protocol, chosen by
the cell's kind and the attack's declared threat (:mod:`~leakshield.experiment.protocols`) → the
evaluator. No defense or attack has a private code path here; see docs/concepts/cell-pipeline.md."""

from __future__ import annotations

# importing the protocol modules registers them
from leakshield.experiment import detection, participant_attack, reference_cells, server_attack  # noqa: F401
from leakshield.experiment.cells import Cell
from leakshield.experiment.config import ExperimentConfig
from leakshield.experiment.protocols import CELL_PROTOCOLS, CellOutput, protocol_of
from leakshield.experiment.world import ExperimentContext, resolve_device
from leakshield.threats import Threat

__all__ = ["CellOutput", "ExperimentContext", "cell_threat", "resolve_device", "run_cell"]


def cell_threat(config: ExperimentConfig, cell: Cell) -> Threat | None:
    """The threat model ``cell`` runs under: its attack's declared threat plus what the config grants
    (labels); None for a cell without an attack."""
    if cell.attack is None:
        return None
    declared = config.create_attack(cell.attack).threat
    return declared.granting(labels_known=config.attack.threat.labels_known)


def run_cell(world: ExperimentContext, cell: Cell, threat: Threat | None = None) -> CellOutput:
    """Compute ``cell`` with its protocol (``threat``: the cell's, when the caller has it already)."""
    if threat is None:
        threat = cell_threat(world.config, cell)
    function, _ = CELL_PROTOCOLS[protocol_of(cell, threat)]
    return function(world, cell)
