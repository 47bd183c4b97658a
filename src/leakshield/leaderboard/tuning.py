"""The leaderboard's learning-rate sweep (``leakshield leaderboard --tune``): every defense trains its
clients with its paper's optimizer at each learning rate of a small grid, for the preset's utility
rounds, and the rate with the best accuracy on the *public* split is selected (the test split, on which
the leaderboard reports accuracy, is never used to choose). The sweep is a grid of utility cells like
any other (resumable, parallel); its result is the ``training`` section of the leaderboard file, printed
for you to keep and written to ``tuning.json`` with every candidate's accuracy."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from leakshield.errors import ConfigError
from leakshield.experiment.config import ExperimentConfig, parse_config
from leakshield.experiment.store import CellRecord, atomic_write_bytes

#: the papers' client optimizers (PRECODE, Anti-GAN: Adam; the others: SGD with momentum)
PAPER_OPTIMIZER = {"precode": "adam", "antigan": "adam"}
#: the learning rates each optimizer is swept over
LEARNING_RATES = {"sgd": (0.01, 0.03, 0.1), "adam": (3e-4, 1e-3, 3e-3)}
SEP = "@lr="


def candidates(name: str, base: dict[str, Any]) -> list[dict[str, Any]]:
    """The client trainings swept for defense ``name`` (``base``: the protocol's ``fl.local``)."""
    optimizer = PAPER_OPTIMIZER.get(name, "sgd")
    momentum = base.get("momentum", 0.9) if optimizer == "sgd" else 0.0
    return [{**base, "optimizer": optimizer, "momentum": momentum, "local_lr": lr}
            for lr in LEARNING_RATES[optimizer]]  # fmt: skip


def tuning_config(config: ExperimentConfig) -> ExperimentConfig:
    """``config`` as a utility-only grid of every defense × candidate training, on its first seed."""
    data = config.model_dump(mode="json", exclude_none=True)
    if config.utility.rounds < 1:
        raise ConfigError("--tune: utility.rounds is 0; the sweep compares accuracy after that many rounds")
    base = data["fl"]["local"]
    defenses = []
    for setting, raw in zip(config.defenses, data["defenses"], strict=True):
        if setting.stack is not None:
            raise ConfigError(f"--tune: defense {setting.display!r} is a stack; tune its parts one by one")
        for training in candidates(str(setting.name), base):
            entry = {k: v for k, v in raw.items() if k != "training"}
            entry.update(label=f"{setting.display}{SEP}{training['local_lr']:g}", training=training)
            defenses.append(entry)
    data.update(name=f"{config.name}-tuning", seeds=config.utility_seeds[:1], defenses=defenses)
    data["utility"] = {**data.get("utility", {}), "seeds": None}
    first = data["attacks"][0]
    data["attacks"] = [{**first, "against": []}]  # utility cells only
    data.pop("axes", None)
    data["report"] = {"rows": ["defense"], "columns": ["metric"], "values": ["accuracy", "accuracy_public"]}
    return parse_config(data, source="--tune")


def selection(records: Sequence[CellRecord]) -> dict[str, Any]:
    """Per defense: each candidate learning rate's public- and test-split accuracy and the one chosen
    (best public accuracy; ties: the larger rate, the shared protocol's side)."""
    found: dict[str, dict[str, Any]] = {}
    for r in records:
        if r.kind != "utility" or r.status != "ok" or not r.defense or SEP not in r.defense:
            continue
        name, lr = r.defense.rsplit(SEP, 1)
        public = r.metrics.get("accuracy_public")
        if not isinstance(public, int | float) or not math.isfinite(public):
            continue
        entry = found.setdefault(name, {"candidates": {}})
        test = float(r.metrics.get("accuracy", math.nan))
        entry["candidates"][lr] = {
            "accuracy_public": round(float(public), 4),
            "accuracy_test": round(test, 4),
        }
    for entry in found.values():
        best = max(entry["candidates"].items(), key=lambda kv: (kv[1]["accuracy_public"], float(kv[0])))
        entry["chosen"] = float(best[0])
    return found


def training_section(sweep: ExperimentConfig, chosen: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The leaderboard file's ``training`` section (keyed by defense name) for the sweep's choices
    (``sweep``: the :func:`tuning_config` grid)."""
    out: dict[str, dict[str, Any]] = {}
    for setting in sweep.defenses:
        label, _ = setting.display.rsplit(SEP, 1)
        training = setting.training
        if training is None or label not in chosen or str(setting.name) in out:
            continue
        if training.local_lr == chosen[label]["chosen"]:
            out[str(setting.name)] = training.model_dump(include={"optimizer", "local_lr", "momentum"})
    return out


def write_tuning(run_dir: Path, config: ExperimentConfig, records: Sequence[CellRecord]) -> tuple[Path, str]:
    """Write ``tuning.json`` (every candidate and the choice) and return it with the YAML to keep."""
    chosen = selection(records)
    section = training_section(config, chosen)
    path = run_dir / "tuning.json"
    record = {
        "rounds": config.utility.rounds,
        "seed": config.seeds[0],
        "defenses": chosen,
        "training": section,
    }
    atomic_write_bytes(path, json.dumps(record, indent=1, sort_keys=True).encode())
    text = yaml.safe_dump({"training": section}, sort_keys=True, default_flow_style=None, width=110)
    return path, text
