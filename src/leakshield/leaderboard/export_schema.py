"""A leaderboard export read as the schema :func:`~leakshield.leaderboard.export.export_json` writes:
every cell's fields and their types, finite numbers wherever a number is promised (ε alone may be ∞:
DP with σ = 0), no key written twice in an object, no cell twice in a group, and the digest of its
numbers unchanged since it was written. A damaged, truncated, foreign or oversized export is refused
in one line naming the file and what was expected — before anything is rendered from it, so that a
README is never rewritten, nor ``--check`` reads "fresh", from an export whose numbers changed."""

from __future__ import annotations

import hashlib
import json
import math
import typing
from pathlib import Path
from typing import Any, Literal

import pydantic

from leakshield.errors import LeakshieldError
from leakshield.experiment.store import UNBOUNDED
from leakshield.leaderboard.rerun import Rerun
from leakshield.threats import Threat

#: the largest export read (the standard preset's is about 6 MB; a full preset's tens)
MAX_BYTES = 512 * 2**20
#: text metrics an export keeps (a fitted defense's gap to its convergence criterion)
TEXT_METRICS = frozenset({"under_budget"})
#: what regenerating an export takes (said after every refusal)
REGENERATE = "regenerate it with 'leakshield leaderboard --preset NAME --readme README.md'"

Finite = pydantic.confloat(allow_inf_nan=False)


class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True)


class VictimScores(_Strict):
    """One victim's scores (an image batch's per-image SSIMs, or one text sequence's ROUGE)."""

    ssim: list[Finite] | Finite | None = None  # type: ignore[valid-type]
    prior_ssim: list[Finite] | Finite | None = None  # type: ignore[valid-type]
    class_: int | None = pydantic.Field(default=None, alias="class")
    class_ssim: Finite | None = None  # type: ignore[valid-type]
    refused: str | None = None
    victim: int | None = None
    sequence: int | None = None
    rouge1: Finite | None = None  # type: ignore[valid-type]
    rouge2: Finite | None = None  # type: ignore[valid-type]
    floor_rouge2: Finite | None = None  # type: ignore[valid-type]


class Cell(_Strict):
    """One stored cell as exported (its images left out)."""

    key: str = pydantic.Field(min_length=1)
    kind: str = pydantic.Field(min_length=1)
    model: str | None
    defense: str | None
    attack: str | None
    round: int | None
    seed: int | None
    status: Literal["ok", "failed"]
    error: str | None
    seconds: Finite = pydantic.Field(ge=0)  # type: ignore[valid-type]
    finished: Finite = pydantic.Field(ge=0)  # type: ignore[valid-type]
    metrics: dict[str, Any]
    attack_name: str | None = None
    threat: dict[str, Any] | None = None
    scale: str | None = None
    stage: int = pydantic.Field(default=1, ge=1, le=2)
    environment: dict[str, Any] = pydantic.Field(default_factory=dict)
    victims: list[VictimScores] = pydantic.Field(default_factory=list)

    @pydantic.field_validator("threat")
    @classmethod
    def _a_threat(cls, threat: dict[str, Any] | None) -> dict[str, Any] | None:
        if threat is not None:
            try:
                Threat.from_json(threat)
            except (KeyError, ValueError, TypeError) as exc:
                raise ValueError(f"not a threat model ({type(exc).__name__}: {exc})") from None
        return threat

    @pydantic.field_validator("metrics")
    @classmethod
    def _numbers(cls, metrics: dict[str, Any]) -> dict[str, Any]:
        for name, value in metrics.items():
            if value is None or (name in TEXT_METRICS and isinstance(value, str)):
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"metric {name!r} is {type(value).__name__} {value!r}, not a number")
            if not math.isfinite(value) and not (name in UNBOUNDED and value == math.inf):
                raise ValueError(f"metric {name!r} is {value}, not a finite number")
        return metrics


class RunFacts(pydantic.BaseModel):
    """The run's facts: only what rendering reads is required."""

    model_config = pydantic.ConfigDict(extra="allow", strict=True)
    preset: str = pydantic.Field(min_length=1)
    name: str
    cells: int = pydantic.Field(ge=0)


class ScenarioCells(_Strict):
    name: str = pydantic.Field(min_length=1)
    title: str
    ranked: bool
    cells: list[Cell]


class TextCells(_Strict):
    rounds: int = pydantic.Field(ge=0)
    cells: list[Cell]


#: a stage-2 rerun's coordinates as JSON: :class:`~leakshield.leaderboard.rerun.Rerun`'s fields, read
#: from the dataclass itself (so that a field added there is one the schema takes)
RerunCoordinates = pydantic.create_model(
    "RerunCoordinates",
    __base__=_Strict,
    **{name: (hint, ...) for name, hint in typing.get_type_hints(Rerun, include_extras=True).items()},
)


class StageTwoCells(_Strict):
    rerun: RerunCoordinates
    cells: list[Cell]


class Export(_Strict):
    """The whole export: its run facts, the main grid's cells (at least one), the scenarios', the text
    section's and the stage-2 reruns', the provenance table and the digest of its numbers (required: an
    export without one, written before digests, cannot show that its numbers are the run's)."""

    run: RunFacts
    cells: list[Cell] = pydantic.Field(min_length=1)
    scenarios: list[ScenarioCells] = pydantic.Field(default_factory=list)
    provenance: dict[str, Any] = pydantic.Field(default_factory=dict)
    text: TextCells | None = None
    stage2: list[StageTwoCells] = pydantic.Field(default_factory=list)
    digest: str = pydantic.Field(pattern=r"^sha256:[0-9a-f]{64}$")


def _numbers(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cells without their environment (the stamps a migration may add): what the digest covers."""
    return [{k: v for k, v in c.items() if k != "environment"} for c in cells]


def numbers_digest(data: dict[str, Any]) -> str:
    """``sha256:…`` of every group's cells (their numbers, coordinates and statuses; not the stamps in
    their environment, nor the run facts or provenance table a migration may add to)."""
    groups = {
        "cells": _numbers(data.get("cells", [])),
        "scenarios": [{**s, "cells": _numbers(s["cells"])} for s in data.get("scenarios", [])],
        "stage2": [{**e, "cells": _numbers(e["cells"])} for e in data.get("stage2", [])],
        "text": None
        if data.get("text") is None
        else {**data["text"], "cells": _numbers(data["text"]["cells"])},
    }
    canonical = json.dumps(groups, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"the key {key!r} is written twice in one object")
        found[key] = value
    return found


def _constant(name: str) -> float:
    if name == "Infinity":
        return math.inf  # ε of σ = 0; the schema refuses it anywhere else
    raise ValueError(f"{name} where a number is promised")


def _where(error: dict[str, Any]) -> str:
    return ".".join(str(part) for part in error["loc"]) or "the top level"


def parse_export(text: str, where: str) -> dict[str, Any]:
    """``text`` (the export read from ``where``) as validated JSON, or a one-line :class:`LeakshieldError`."""
    try:
        data = json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant)
    except RecursionError:
        raise LeakshieldError(f"{where}: not a leaderboard export (nested too deeply)") from None
    except ValueError as exc:  # JSONDecodeError is one; a repeated key and NaN are ours
        raise LeakshieldError(f"{where}: not a readable leaderboard export ({exc}); {REGENERATE}") from None
    if not isinstance(data, dict):
        raise LeakshieldError(
            f"{where}: not a leaderboard export (a JSON {type(data).__name__}, expected an object with "
            f"'run' and 'cells'); {REGENERATE}"
        )
    try:
        Export.model_validate(data)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        more = f" (and {exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
        raise LeakshieldError(
            f"{where}: a damaged leaderboard export: {_where(first)}: {first['msg']}{more}; {REGENERATE}"
        ) from None
    names = [s["name"] for s in data.get("scenarios", [])]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise LeakshieldError(f"{where}: a damaged leaderboard export: scenario {twice[0]!r} is written "
                              f"{names.count(twice[0])} times; {REGENERATE}")  # fmt: skip
    groups = [("cells", data["cells"])]
    groups += [(f"scenario {s['name']}", s["cells"]) for s in data.get("scenarios", [])]
    groups += [(f"stage-2 rerun {i}", e["cells"]) for i, e in enumerate(data.get("stage2", []))]
    groups += [("text", data["text"]["cells"])] if data.get("text") else []
    for name, cells in groups:
        keys = [c["key"] for c in cells]
        twice = sorted({k for k in keys if keys.count(k) > 1}) if len(set(keys)) < len(keys) else []
        if twice:
            raise LeakshieldError(f"{where}: a damaged leaderboard export: {name} holds cell {twice[0]!r} "
                                  f"{keys.count(twice[0])} times; {REGENERATE}")  # fmt: skip
    if data["digest"] != numbers_digest(data):
        raise LeakshieldError(
            f"{where}: its numbers differ from the digest written with them (edited or damaged since); "
            f"{REGENERATE}"
        )
    return data


def read_export(path: Path, option: str = "--from-export") -> str:
    """The text of the export at ``path``, validated (:func:`parse_export`): a missing, empty, binary,
    oversized, truncated, foreign or edited file is one :class:`LeakshieldError` line naming it."""
    where = f"{option} {path}" if option else str(path)
    if path.is_dir():
        raise LeakshieldError(f"{where}: a folder; give a file (an export: docs/leaderboard/<preset>.json)")
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise LeakshieldError(
                f"{where}: {size / 2**20:.0f} MiB, larger than any export ({MAX_BYTES // 2**20} MiB at most)"
            )
        raw = path.read_bytes()
    except OSError as exc:
        raise LeakshieldError(f"{where}: cannot be read ({exc.strerror or exc})") from None
    if not raw.strip():
        raise LeakshieldError(f"{where}: empty; expected a leaderboard export (JSON); {REGENERATE}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LeakshieldError(
            f"{where}: not UTF-8 text (byte {exc.start}), not a leaderboard export"
        ) from None
    parse_export(text, where)
    return text
