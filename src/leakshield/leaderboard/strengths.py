"""Strength ladders: each tunable defense at several strengths, so defenses can be compared at equal
accuracy cost (:mod:`.budgets`) and drawn as curves on the privacy–utility plot.

The leaderboard file's ``strengths:`` maps a row's label to one parameter and its ladder, weakest first,
from "no measurable cost" to "does not train" (``gaussian-noise: {sigma: [1.0e-3, 1.0e-2, 1.0e-1, 1]}``).
A preset's ``rungs:`` says how many rungs of each ladder it runs besides the row itself — a number for
every ladder, or a mapping of labels to numbers with ``others`` for the rest — spread evenly over the
ladder's other values, both ends included (one rung: the strongest). The value equal to the row's own is
the row itself; each rung is a copy of the row (its training, its parameters) with that one parameter
changed, labelled ``<label>@<parameter>=<value>`` — and every attack whose ``against`` names the row names
its rungs too (:func:`with_rung_targets`), so a rung meets the attacks its row meets.
Rungs run in the main grid only (a scenario lists its own defenses)."""

from __future__ import annotations

import copy
from typing import Any

from leakshield.defenses import DEFENSES
from leakshield.errors import ConfigError
from leakshield.leaderboard.budgets import RUNG_MARK, family

#: the key of a preset's ``rungs`` mapping that applies to every ladder it does not name
OTHERS = "others"


def value_text(value: Any) -> str:
    """A rung's value as its label shows it (``0.001``, ``1``, ``int8``)."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def spread(count: int, length: int) -> list[int]:
    """``count`` indices spread evenly over ``range(length)``, both ends included (all when
    ``count`` ≥ ``length``; none for 0; one: the last, the strongest rung)."""
    if count <= 0:
        return []
    if count >= length:
        return list(range(length))
    if count == 1:
        return [length - 1]
    return sorted({round(i * (length - 1) / (count - 1)) for i in range(count)})


def _ladders(document: dict[str, Any], source: str) -> dict[str, tuple[str, list[Any]]]:
    """label → (parameter, values) of the file's ``strengths`` section, checked."""
    found = document.get("strengths") or {}
    if not isinstance(found, dict):
        raise ConfigError(f"{source}: strengths: expected row label → {{parameter: [values, …]}}")
    out = {}
    for label, spec in found.items():
        if not isinstance(spec, dict) or len(spec) != 1:
            raise ConfigError(f"{source}: strengths.{label}: expected one parameter and its ladder, "
                              "e.g. {sigma: [1.0e-3, 1.0e-2, 1.0e-1]}")  # fmt: skip
        ((parameter, values),) = spec.items()
        if not isinstance(values, list) or len(values) < 2:
            raise ConfigError(f"{source}: strengths.{label}.{parameter}: expected a list of 2 or more "
                              f"values, weakest first; got {values!r}")  # fmt: skip
        out[str(label)] = (str(parameter), values)
    return out


def _like(value: Any, own: Any, where: str) -> Any:
    """``value`` as a number where the row's own value is one (YAML reads ``1e-3`` as a string), or where
    the row has none and it reads as one."""
    if not isinstance(value, str) or isinstance(own, bool):
        return value
    if own is None or isinstance(own, str):
        try:
            return float(value)
        except ValueError:
            return value
    if isinstance(own, int | float):
        try:
            return float(value)
        except ValueError:
            raise ConfigError(f"{where}: {value!r} is not a number (the row's value is {own!r})") from None
    return value


def _label(entry: Any) -> Any:
    """A defense entry's row label: its ``label``, else its name (a bare string is its name)."""
    return entry if isinstance(entry, str) else entry.get("label") or entry.get("name")


def with_rung_targets(attacks: list[Any], defenses: list[Any]) -> list[Any]:
    """``attacks`` with each ``against`` list extended by the rungs of the rows it names."""
    rungs: dict[str, list[str]] = {}
    for entry in defenses:
        label = str(_label(entry))
        if RUNG_MARK in label:
            rungs.setdefault(family(label), []).append(label)
    out = []
    for entry in attacks:
        if isinstance(entry, dict) and isinstance(entry.get("against"), list):
            against = [*entry["against"], *(r for row in entry["against"] for r in rungs.get(row, []))]
            entry = {**entry, "against": against}
        out.append(entry)
    return out


def _counts(rungs: Any, ladders: dict[str, Any], where: str) -> dict[str, int]:
    """label → rungs to run, from a preset's ``rungs`` (a number, or a mapping with ``others``)."""
    if rungs is None:
        return {}
    if isinstance(rungs, bool) or not isinstance(rungs, int | dict):
        raise ConfigError(f"{where}: expected a number of rungs for every ladder, or label → number "
                          f"(with '{OTHERS}' for the rest); got {rungs!r}")  # fmt: skip
    if isinstance(rungs, int):
        if rungs < 0:
            raise ConfigError(f"{where}: expected a number of rungs (0 or more); got {rungs}")
        return dict.fromkeys(ladders, rungs)
    unknown = sorted(str(k) for k in rungs if k != OTHERS and k not in ladders)
    if unknown:
        raise ConfigError(f"{where}: no ladder for {unknown}; strengths defines: {', '.join(ladders)}")
    bad = sorted(str(k) for k, v in rungs.items() if isinstance(v, bool) or not isinstance(v, int) or v < 0)
    if bad:
        raise ConfigError(f"{where}: {bad}: expected a number of rungs (0 or more)")
    return {label: int(rungs.get(label, rungs.get(OTHERS, 0))) for label in ladders}


def with_rungs(
    defenses: list[Any], document: dict[str, Any], rungs: Any, *, source: str, preset: str
) -> list[Any]:
    """``defenses`` (a preset's rows, parameters and training merged in) with each ladder's chosen rungs
    appended after its row."""
    ladders = _ladders(document, source)
    counts = _counts(rungs, ladders, f"{source}: presets.{preset}.rungs")
    labels = {_label(d): d for d in defenses}
    marked = sorted(str(label) for label in labels if RUNG_MARK in str(label))
    if marked:
        raise ConfigError(f"{source}: defense labels {marked}: '{RUNG_MARK}' marks a strength rung; "
                          "choose labels without it")  # fmt: skip
    if not any(counts.values()):
        return defenses
    named = set(rungs) - {OTHERS} if isinstance(rungs, dict) else set()
    missing = sorted(label for label in named if counts.get(label) and label not in labels)
    if missing:
        raise ConfigError(f"{source}: strengths: {missing} name no row of presets.{preset}; its rows are "
                          f"{', '.join(str(k) for k in labels)}")  # fmt: skip
    out = []
    for entry in defenses:
        out.append(entry)
        item = {"name": entry} if isinstance(entry, str) else dict(entry)
        label = _label(item)
        if label not in ladders or not counts.get(label):
            continue
        if "name" not in item:
            raise ConfigError(f"{source}: strengths.{label}: a ladder changes one defense's parameter; "
                              f"{label} is a stack (give each strength its own row instead)")  # fmt: skip
        parameter, values = ladders[label]
        fields = DEFENSES.get(item["name"]).params.model_fields
        if parameter not in fields:
            raise ConfigError(f"{source}: strengths.{label}: {item['name']} has no parameter {parameter!r}; "
                              f"its parameters: {', '.join(fields)}")  # fmt: skip
        own = item.get(parameter, fields[parameter].default)
        own = _like(own, None, "") if isinstance(own, str) else own  # a row's own `1e-3` is a number too
        values = [_like(v, own, f"{source}: strengths.{label}.{parameter}") for v in values]
        others = [v for v in values if v != own]
        for index in spread(counts[label], len(others)):
            value = others[index]
            rung = copy.deepcopy(item)
            rung[parameter] = value
            rung["label"] = f"{label}{RUNG_MARK}{parameter}={value_text(value)}"
            out.append(rung)
    return out
