"""Every (row, seed) of a membership run kept as JSON under the output folder, keyed by a digest of all
it depends on: the config's setting (not its rows, seeds or reporting level), the row, the seed, the
contents of every module of the package it runs (the code graph's closure of the game, the defenses,
models and datasets), the torch version and the device. A rerun reuses what matches, so a long grid
resumes after a crash, and an edit anywhere on that path recomputes."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import torch

from leakshield.membership.config import MembershipConfig, MembershipRow
from leakshield.membership.run import Guarantee, SeedRun
from leakshield.models.imported import code_hash, is_user_model

#: the game's module, and the packages whose registries a config names components from: every module
#: under them is a root (a package's registering imports are not followed by the code graph)
ROOTS = ("leakshield.membership.run",)
REGISTRIES = ("leakshield.defenses", "leakshield.models", "leakshield.data", "leakshield.fl")


def code_closure() -> dict[str, str]:
    """Every module a run may execute, with its content hash."""
    from leakshield.code_graph import installed_graph

    graph = installed_graph()
    roots = [*ROOTS, *(m for m in graph.modules if m.startswith(tuple(p + "." for p in REGISTRIES)))]
    return graph.closure(roots)


@functools.cache
def code_digest() -> str:
    """16 hex digits over the contents of every module a run may execute."""
    return hashlib.sha256(json.dumps(sorted(code_closure().items())).encode()).hexdigest()[:16]


def run_key(config: MembershipConfig, row: MembershipRow, seed: int, device: str = "cpu") -> str:
    """The digest a kept (row, seed) must carry to be reused."""
    setting = config.model_dump(mode="json", exclude={"rows", "seeds", "fpr"})
    if is_user_model(config.model.name):  # a user's network: its source is part of the key
        setting["model_code"] = code_hash(config.model.name)
    text = json.dumps([setting, row.model_dump(mode="json"), seed, code_digest(), torch.__version__,
                       torch.device(device).type], sort_keys=True)  # fmt: skip
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_path(folder: Path, label: str, seed: int) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in label)
    return folder / f"{safe[:40]}-{hashlib.sha256(label.encode()).hexdigest()[:6]}-seed{seed}.json"


def from_json(body: dict) -> SeedRun:
    body = dict(body)
    body["scores"] = {k: [float(v) for v in vs] for k, vs in body["scores"].items()}
    body["guarantees"] = [Guarantee(**g) for g in body.get("guarantees", [])]
    return SeedRun(**body)


def kept_run(
    folder: Path, config: MembershipConfig, row: MembershipRow, seed: int, compute: Callable[[], SeedRun],
    device: str = "cpu",
) -> tuple[SeedRun, bool]:  # fmt: skip
    """The kept :class:`SeedRun` of (row, seed) under ``folder`` if its key matches, else ``compute()``
    kept there (atomically); also whether it was reused. A damaged file is recomputed."""
    path = run_path(folder, row.label, seed)
    key = run_key(config, row, seed, device)
    if path.exists():
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
            if stored.get("key") == key:
                return from_json(stored["run"]), True
        except (ValueError, KeyError, TypeError):
            pass
    run = compute()
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"key": key, "run": dataclasses.asdict(run)}), encoding="utf-8")
    os.replace(tmp, path)
    return run, False
