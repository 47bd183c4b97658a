"""The leaderboard's protocol and presets (``configs/leaderboard.yaml``, shipped in the package): a
``base`` experiment config, presets that deep-merge into it (lists replace), per-name parameter
overrides (``params``), extra rows (``add_defenses``), each defense's own client training
(``training``: the paper's optimizer at the learning rate ``--tune`` selected), the realism
``scenarios`` a preset runs beside its main grid, and the CIFAR-10 switch used with ``--data-root`` (a
preset that names its own dataset, ``gpu``, reads that dataset's files under the root instead)."""

from __future__ import annotations

import copy
import difflib
from importlib import resources
from pathlib import Path
from typing import Any

from leakshield.attacks import ATTACKS
from leakshield.defenses import DEFENSES
from leakshield.errors import ConfigError
from leakshield.experiment.config import ExperimentConfig, parse_config
from leakshield.experiment.yaml_files import parse_yaml, read_yaml
from leakshield.leaderboard.strengths import with_rung_targets, with_rungs
from leakshield.registry import component_entry

PRESET_KEYS = ("params", "add_defenses", "scenarios", "text", "stage2", "rungs")
#: keys of a scenario that describe it rather than change the experiment
SCENARIO_KEYS = ("title", "ranked")


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
        item = dict(component_entry(entry)) if isinstance(entry, dict) else {"name": entry}
        if item.get("name") in params:
            item = deep_merge(item, params[item["name"]])
        out.append(item if len(item) > 1 or not isinstance(entry, str) else entry)
    return out


def _known_names(names: list[str], where: str, kinds: dict[str, list[str]]) -> None:
    """Refuse names that are no registered component of ``kinds`` (kind → allowed names): a misspelt
    key would otherwise be ignored, and its component run at other settings than the file says."""
    allowed = sorted({n for found in kinds.values() for n in found})
    for name in names:
        if name not in allowed:
            close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            lists = "; ".join(f"{kind}: {', '.join(found)}" for kind, found in kinds.items())
            raise ConfigError(f"{where}: unknown name {name!r}{hint}; allowed — {lists}")


def _registered(registry: Any) -> list[str]:
    return sorted({*registry.names(), *(alias for entry in registry for alias in entry.aliases)})


def _with_training(entries: list[Any], document: dict[str, Any], local: dict[str, Any]) -> list[Any]:
    """Give every defense named in the file's ``training`` section that client training (merged into
    the protocol's ``fl.local``), unless the entry sets its own."""
    training = document.get("training") or {}
    if not isinstance(training, dict):
        raise ConfigError("training: expected defense name → client training (e.g. precode: "
                          "{optimizer: adam, local_lr: 0.001})")  # fmt: skip
    out = []
    for entry in entries:
        item = {"name": entry} if isinstance(entry, str) else dict(entry)
        own = training.get(item.get("name"))
        if own is not None and "training" not in item:
            item["training"] = deep_merge(local, own)
        out.append(item if len(item) > 1 or not isinstance(entry, str) else entry)
    return out


def leaderboard_data(
    text: str,
    preset: str,
    *,
    data_root: str | Path | None = None,
    source: str = "leaderboard config",
    rungs: bool = True,
) -> dict[str, Any]:
    """The experiment config (as a mapping) of ``preset`` in the leaderboard file ``text`` (``rungs``:
    with the strength ladders' rungs the preset runs, :mod:`.strengths`)."""
    document = parse_yaml(text, source) if isinstance(text, str) else text
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
    _known_names([str(k) for k in params], f"{source}: presets.{preset}.params",
                 {"attacks": _registered(ATTACKS), "defenses": _registered(DEFENSES)})  # fmt: skip
    training = document.get("training")
    if isinstance(training, dict):
        _known_names([str(k) for k in training], f"{source}: training", {"defenses": _registered(DEFENSES)})
    if not isinstance(extra, list):
        raise ConfigError(f"{source}: presets.{preset}.add_defenses: expected a list of defenses")
    changes.pop("scenarios", None)
    changes.pop("text", None)
    changes.pop("stage2", None)
    chosen_rungs = changes.pop("rungs", None)
    data = deep_merge(document["base"], changes)
    data.setdefault("name", f"leaderboard-{preset}")
    local = (data.get("fl") or {}).get("local") or {}
    data["defenses"] = _with_training(
        _with_params([*data.get("defenses", []), *extra], params), document, local
    )
    if rungs:
        data["defenses"] = with_rungs(data["defenses"], document, chosen_rungs, source=source, preset=preset)
    data["attacks"] = with_rung_targets(_with_params(data.get("attacks", []), params), data["defenses"])
    own_files = data.get("dataset", {}).get("name") != (document["base"].get("dataset") or {}).get("name")
    if data_root is not None and own_files:  # a preset that names its own dataset files (gpu)
        root = Path(data_root).expanduser()
        if root.is_file() or (root.suffix and not root.is_dir()):  # the dataset's one file (an .npz)
            root, data["dataset"]["file"] = root.parent, root.name
        data["dataset"]["root"] = str(root)
    elif data_root is not None:
        if not isinstance(document.get("cifar10"), dict):
            raise ConfigError(f"--data-root: {source} has no 'cifar10' section (the dataset and budgets "
                              "to use with files), so the root would be ignored")  # fmt: skip
        data = deep_merge(data, document["cifar10"])
        data["dataset"]["root"] = str(data_root)
        data["name"] = f"{data['name']}-{data['dataset']['name']}"
    return data


def text_data(text: str, preset: str, *, source: str = "leaderboard config") -> dict[str, Any] | None:
    """The text grid's config (a mapping) of ``preset``: the file's ``text`` section with the preset's
    ``text`` changes merged in; None where the file has no text section or the preset drops it
    (``text: null``)."""
    document = (parse_yaml(text, source) if isinstance(text, str) else text) or {}
    base = document.get("text")
    chosen = (document.get("presets") or {}).get(preset) or {}
    if base is None or ("text" in chosen and chosen["text"] is None):
        return None
    changes = chosen.get("text") or {}
    if not isinstance(base, dict) or not isinstance(changes, dict):
        raise ConfigError(f"{source}: text and presets.{preset}.text: expected mappings (a text grid config)")
    data = deep_merge(base, changes)
    data["name"] = changes.get("name") or f"{base.get('name', 'leaderboard-text')}-{preset}"
    return data


def load_text_leaderboard(
    preset: str, *, path: str | Path | None = None, corpus: str | Path | None = None
) -> Any:
    """The validated text grid config of ``preset`` (None: no text section), reading ``corpus``."""
    from leakshield.text_grid.config import parse_text_config

    text = read_yaml(path, "leaderboard file") if path is not None else default_leaderboard_text()
    source = str(path) if path is not None else "configs/leaderboard.yaml"
    data = text_data(text, preset, source=source)
    if data is None:
        return None
    if corpus is not None:
        data["corpus"] = {**(data.get("corpus") or {}), "path": str(corpus)}
    return parse_text_config(data, source=f"{source} (text)")


def load_leaderboard(
    preset: str, *, path: str | Path | None = None, data_root: str | Path | None = None
) -> ExperimentConfig:
    """The validated experiment config of ``preset`` (from ``path``, default the shipped file)."""
    text = read_yaml(path, "leaderboard file") if path is not None else default_leaderboard_text()
    source = str(path) if path is not None else "configs/leaderboard.yaml"
    return parse_config(leaderboard_data(text, preset, data_root=data_root, source=source), source=source)


def scenario_names(text: str, preset: str) -> list[str]:
    """The scenarios ``preset`` runs beside its main grid (in the file's order)."""
    document = parse_yaml(text, "leaderboard config") if isinstance(text, str) else text
    chosen = ((document or {}).get("presets") or {}).get(preset) or {}
    names = chosen.get("scenarios") or []
    defined = (document or {}).get("scenarios") or {}
    unknown = [n for n in names if n not in defined]
    if unknown:
        raise ConfigError(f"presets.{preset}.scenarios: {unknown} not defined; "
                          f"scenarios: {', '.join(defined)}")  # fmt: skip
    return list(names)


def scenario_data(
    text: str,
    preset: str,
    scenario: str,
    *,
    data_root: str | Path | None = None,
    source: str = "leaderboard config",
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(experiment config mapping, description) of one scenario: the preset's config with the
    scenario's changes merged in (lists replace; the preset's ``params`` apply to its components)."""
    document = parse_yaml(text, source) if isinstance(text, str) else text
    main = leaderboard_data(document, preset, data_root=data_root, source=source, rungs=False)
    spec = dict(((document.get("scenarios") or {}).get(scenario)) or {})
    about = {k: spec.pop(k) for k in SCENARIO_KEYS if k in spec}
    params = ((document.get("presets") or {}).get(preset) or {}).get("params") or {}
    data = deep_merge(main, spec)
    data["name"] = f"{main['name']}-{scenario}"
    if "defenses" in spec:
        local = (data.get("fl") or {}).get("local") or {}
        data["defenses"] = _with_training(_with_params(spec["defenses"], params), document, local)
    if "attacks" in spec:
        data["attacks"] = _with_params(spec["attacks"], params)
    return data, {"title": about.get("title", scenario), "ranked": bool(about.get("ranked", False))}


def load_scenarios(
    preset: str, *, path: str | Path | None = None, data_root: str | Path | None = None
) -> list[tuple[str, ExperimentConfig, dict[str, Any]]]:
    """(name, validated config, description) of every scenario of ``preset``."""
    text = read_yaml(path, "leaderboard file") if path is not None else default_leaderboard_text()
    source = str(path) if path is not None else "configs/leaderboard.yaml"
    out = []
    for name in scenario_names(text, preset):
        data, about = scenario_data(text, preset, name, data_root=data_root, source=source)
        out.append((name, parse_config(data, source=f"{source} (scenario {name})"), about))
    return out


def load_stage_two_victims(preset: str, *, path: str | Path | None = None) -> int:
    """The fresh victims per seed of ``preset``'s stage 2 (``presets.<preset>.stage2.victims``; 0: off)."""
    from leakshield.leaderboard.stage_two import stage_two_victims

    text = read_yaml(path, "leaderboard file") if path is not None else default_leaderboard_text()
    document = parse_yaml(text, "leaderboard config") if isinstance(text, str) else text
    return stage_two_victims(document or {}, preset)
