"""Which published cells and rows the installed code would compute differently: each cell of an export
carries its components' stamps (:mod:`leakshield.experiment.stamps`); a cell is *stale* when one of them
differs from what the current code and the shipped preset give the same cell, and a table row is stale
when a cell it is computed from is. The export's ``provenance`` table (stamp → modules and settings)
says what changed: ``defense gaussian-noise: leakshield.defenses.noise edited``. Text cells are judged
as image cells, by the text grid's stamps (:mod:`leakshield.text_grid.stamps`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from leakshield.code_graph import CodeGraph, installed_graph
from leakshield.experiment.cells import expand_grid
from leakshield.experiment.config import ExperimentConfig
from leakshield.experiment.stamps import (
    ComponentStamper,
    Stamper,
    module_changes,
    stale_kinds,
    unstamped_fresh,
)
from leakshield.experiment.store import CellRecord
from leakshield.leaderboard.threats import threat_of
from leakshield.provenance import tree_hash
from leakshield.text_grid.config import TextExperimentConfig
from leakshield.text_grid.stamps import TextStamper, text_cells

#: a cell's place in an export: (scenario name or None for the main grid, cell key)
Place = tuple[str | None, str]
#: the place of the text section's cells in an export (its "scenario": a name no scenario can take)
TEXT_SCOPE = "(text)"
#: a grid an export's cells come from: an image grid's config or the text section's
GridConfig = ExperimentConfig | TextExperimentConfig


def grid_of(config: GridConfig, graph: CodeGraph | None = None) -> tuple[ComponentStamper, dict[str, Any]]:
    """The stamper of ``config``'s cells under ``graph`` (default: the installed code) and its cells by
    key."""
    if isinstance(config, TextExperimentConfig):
        return TextStamper(config, graph), text_cells(config)
    return Stamper(config, graph), {c.key: c for c in expand_grid(config)}


@dataclass(frozen=True)
class Staleness:
    """The stale cells of an export (place → why, one phrase per changed component) out of ``cells``."""

    cells: int
    stale: dict[Place, list[str]] = field(default_factory=dict)

    @property
    def reasons(self) -> list[str]:
        """Every distinct reason, in order."""
        return sorted({reason for found in self.stale.values() for reason in found})

    @property
    def changes(self) -> list[str]:
        """The reasons grouped by what changed: ``leakshield.defenses.noise edited (defense
        gaussian-noise, defense laplacian-noise)``."""
        by_change: dict[str, list[str]] = {}
        for reason in self.reasons:
            who, _, what = reason.partition(": ")
            by_change.setdefault(what or who, []).append(who if what else "")
        return [f"{what} ({', '.join(w for w in who if w)})" if any(who) else what
                for what, who in sorted(by_change.items())]  # fmt: skip


def _changed(kind: str, stored: str | None, current: Any, table: dict[str, Any]) -> str:
    """Why a component's stamp moved: the modules edited, added or removed, or its settings."""
    name = f"{kind} {current.name}" if kind != "core" else "the shared core"
    old = table.get(stored or "")
    if old is None:
        return f"{name}: computed by code this export does not describe"
    words = module_changes(old["modules"], current.modules)
    if old["settings"] != current.settings:
        words.append("its settings changed")
    return f"{name}: {', '.join(words) or 'changed'}"


def judge(
    groups: Sequence[tuple[str | None, GridConfig | None, Sequence[CellRecord]]],
    table: dict[str, Any],
    graph: CodeGraph | None = None,
) -> Staleness:
    """Judge each ``(scenario, config, records)`` group against ``config`` as the installed code (or
    ``graph``) computes it; a group without a config (no longer in the preset) is stale whole."""
    stale: dict[Place, list[str]] = {}
    total = 0
    tree = tree_hash((graph or installed_graph()).root)  # what judges cells stored before stamps
    for scope, config, records in groups:
        total += len(records)
        if config is None:
            for r in records:
                where = "the text section" if scope == TEXT_SCOPE else f"scenario {scope}"
                stale[(scope, r.key)] = [f"{where}: no longer in the preset"]
            continue
        stamper, cells = grid_of(config, graph)
        for r in records:
            cell = cells.get(r.key)
            if cell is None:
                stale[(scope, r.key)] = [f"{r.model} · {r.defense}: no longer in the preset's grid"]
                continue
            components = stamper.components(cell)
            current = {kind: c.stamp for kind, c in components.items()}
            stored = r.environment.get("components")
            if not stored:
                if not unstamped_fresh(r.environment, tree):
                    stale[(scope, r.key)] = ["computed by another source tree, before per-component stamps"]
                continue
            kinds = stale_kinds(stored, current)
            if kinds:
                stale[(scope, r.key)] = [
                    _changed(k, (stored or {}).get(k), components[k], table) for k in kinds if k in components
                ] or ["a component it ran through is gone"]
    return Staleness(total, stale)


def provenance_table(
    groups: Sequence[tuple[GridConfig, Sequence[CellRecord]]], graph: CodeGraph | None = None
) -> dict[str, Any]:
    """stamp → the component's kind, name, modules and settings, for every stamp the records carry that
    the installed code (or ``graph``) gives their cells (what a later check compares against)."""
    out: dict[str, Any] = {}
    for config, records in groups:
        stamper, cells = grid_of(config, graph)
        for r in records:
            stored = r.environment.get("components") or {}
            if r.key not in cells or not stored:
                continue
            for kind, component in stamper.components(cells[r.key]).items():
                if stored.get(kind) == component.stamp:
                    out[component.stamp] = component.as_json()
    return dict(sorted(out.items()))


def stale_labels(
    records: Sequence[tuple[str | None, CellRecord]], stale: dict[Place, list[str]], threat: str | None = None
) -> set[str]:
    """The ``model · defense`` rows of a table over ``records`` that a stale cell feeds: its attack cells
    (``threat``: only those run under that threat model, a ranking's), its utility, the undefended
    utility its ADR and cost are relative to, and the baseline every row is judged by."""
    fed = [(s, r) for s, r in records if r.kind != "attack" or threat is None or threat_of(r) == threat]
    hit = [r for scope, r in fed if (scope, r.key) in stale]
    labels = {f"{r.model} · {r.defense}" for _, r in fed if r.model and r.defense}
    if any(r.kind == "baseline" for r in hit):
        return labels
    out = {f"{r.model} · {r.defense}" for r in hit if r.model and r.defense}
    undefended = {r.model for r in hit if r.kind == "utility" and r.defense == "none"}
    return out | {label for label in labels if label.split(" · ")[0] in undefended}
