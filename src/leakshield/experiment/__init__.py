"""Experiments: validated YAML configs, grid expansion, the one cell pipeline, a resumable runner."""

from leakshield.experiment.cells import Cell, expand_grid
from leakshield.experiment.config import ExperimentConfig, load_config, parse_config
from leakshield.experiment.rundir import load_run_config
from leakshield.experiment.runner import ExperimentRunner, RunSummary
from leakshield.experiment.store import ResultStore

__all__ = [
    "Cell",
    "ExperimentConfig",
    "ExperimentRunner",
    "ResultStore",
    "RunSummary",
    "expand_grid",
    "load_config",
    "load_run_config",
    "parse_config",
]
