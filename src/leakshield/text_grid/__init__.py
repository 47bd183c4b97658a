"""Text grids: federated language models attacked through the same FL clients, defense pipeline and
result store as the image grids (``leakshield run`` on a config with ``track: text``)."""

from leakshield.text_grid.attacks import TEXT_ATTACKS, TEXT_DEFENSES, TextAttackInput, TextAttackOutput
from leakshield.text_grid.config import TextExperimentConfig, load_text_config, parse_text_config
from leakshield.text_grid.report import build_text_report
from leakshield.text_grid.runner import TextGridRunner, TextRunSummary

__all__ = [
    "TEXT_ATTACKS",
    "TEXT_DEFENSES",
    "TextAttackInput",
    "TextAttackOutput",
    "TextExperimentConfig",
    "TextGridRunner",
    "TextRunSummary",
    "build_text_report",
    "load_text_config",
    "parse_text_config",
]
