"""The leaderboard's protocol and presets (``configs/leaderboard.yaml``, shipped in the package): a
``base`` experiment config, presets that deep-merge into it (lists replace), per-name parameter
overrides (``params``), extra rows (``add_defenses``), and the CIFAR-10 switch used with ``--data-root``."""

from __future__ import annotations

import copy
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from leakshield.errors import ConfigError
from leakshield.experiment.config import ExperimentConfig, parse_config
from leakshield.experiment.yaml_files import read_yaml

PRESET_KEYS = ("params", "add_defenses")


def default_leaderboard_text() -> str:
    return resources.files("leakshield").joinpath("configs/leaderboard.yaml").read_text()


def deep_merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``changes`` merged in: mappings recursively, anything else (lists too) replaced."""
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _with_params(entries: list[Any], params: dict[str, dict[str, Any]]) -> list[Any]:
    """Merge ``params[name]`` into every entry named ``name`` (strings become mappings)."""
    out = []
    for entry in entries:
        item = {"name": entry} if isinstance(entry, str) else dict(entry)
        if item.get("name") in params:
            item = deep_merge(item, params[item["name"]])
        out.append(item if len(item) > 1 or not isinstance(entry, str) else entry)
    return out


def leaderboard_data(
    text: str, preset: str, *, data_root: str | Path | None = None, source: str = "leaderboard config"
) -> dict[str, Any]:
    """The experiment config (as a mapping) of ``preset`` in the leaderboard file ``text``."""
    document = yaml.safe_load(text) if isinstance(text, str) else text
    document = document or {}
    if not isinstance(document, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(document).__name__}")
    presets = document.get("presets") or {}
    if "base" not in document or not isinstance(document["base"], dict):
        raise ConfigError(f"{source}: no 'base' section (the shared protocol, a mapping)")
    if not isinstance(presets, dict):
        raise ConfigError(f"{source}: presets: expected a mapping of preset names")
    if preset not in presets:
        raise ConfigError(f"--preset {preset!r}; {source} defines: {', '.join(sorted(presets)) or 'none'}")
    if not isinstance(presets[preset] or {}, dict):
        raise ConfigError(f"{source}: presets.{preset}: expected a mapping")
    changes = dict(presets[preset] or {})
    params = changes.pop("params", {}) or {}
    extra = changes.pop("add_defenses", []) or []
    bad = sorted(
        str(k) for k, v in (params.items() if isinstance(params, dict) else []) if not isinstance(v, dict)
    )
    if not isinstance(params, dict) or bad:
        raise ConfigError(f"{source}: presets.{preset}.params: expected component name → mapping of "
                          f"parameters (e.g. ig: {{iterations: 500}}); not a mapping: {bad}")  # fmt: skip
    if not isinstance(extra, list):
        raise ConfigError(f"{source}: presets.{preset}.add_defenses: expected a list of defenses")
    data = deep_merge(document["base"], changes)
    data.setdefault("name", f"leaderboard-{preset}")
    data["defenses"] = _with_params([*data.get("defenses", []), *extra], params)
    data["attacks"] = _with_params(data.get("attacks", []), params)
    if data_root is not None:
        if not isinstance(document.get("cifar10"), dict):
            raise ConfigError(f"--data-root: {source} has no 'cifar10' section (the dataset and budgets "
                              "to use with files), so the root would be ignored")  # fmt: skip
        data = deep_merge(data, document["cifar10"])
        data["dataset"]["root"] = str(data_root)
        data["name"] = f"{data['name']}-{data['dataset']['name']}"
    return data


def load_leaderboard(
    preset: str, *, path: str | Path | None = None, data_root: str | Path | None = None
) -> ExperimentConfig:
    """The validated experiment config of ``preset`` (from ``path``, default the shipped file)."""
    text = read_yaml(path, "leaderboard file") if path is not None else default_leaderboard_text()
    source = str(path) if path is not None else "configs/leaderboard.yaml"
    return parse_config(leaderboard_data(text, preset, data_root=data_root, source=source), source=source)
