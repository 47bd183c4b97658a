"""Tiny experiment configs for the runner and CLI tests (seconds, not minutes)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

TINY: dict[str, Any] = {
    "name": "tiny",
    "seeds": [0],
    "dataset": {"name": "digits", "channels": 1, "size": 16},
    "models": ["lenet"],
    "fl": {"clients": 2, "local": {"algorithm": "fedavg", "local_lr": 0.1, "batch_size": 32}},
    "attack": {"rounds": [0], "update": {"algorithm": "fedsgd"}},
    "victims": {"count": 2, "batch_size": 1, "seed": 0},
    "defenses": ["none"],
    "attacks": [{"name": "ig", "iterations": 20}],
    "utility": {"rounds": 1},
}


def tiny_config(**overrides: Any) -> dict[str, Any]:
    config = copy.deepcopy(TINY)
    config.update(overrides)
    return config


def write_config(path: Path, data: dict[str, Any] | str) -> Path:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path
