"""Per-cell provenance: which code and settings computed a cell, one stamp per component.

A cell runs through the shared core (the pipeline from :func:`~leakshield.experiment.compute.compute_cell`:
federation, training, victims, evaluation, metrics) and through its own components: the dataset, the
model, the defense setting (every defense of a stack and its client training) and the attack. Each
component's stamp hashes the content of the package modules it reaches through the import graph
(:mod:`leakshield.code_graph`: comments and docstrings left out, imports reduced to the names they
bind, module names and paths not hashed) together with the settings the config gives it, as written. A
changed stamp is a cell computed by other code or settings than the current ones: *stale*. An edit to
the noise defense therefore stales the cells that ran it and no other; moving a module or registering a
new attack stales nothing."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from leakshield.attacks import ATTACKS
from leakshield.attacks.execution import split_execution
from leakshield.code_graph import CodeGraph, installed_graph
from leakshield.data import DATASETS
from leakshield.defenses import DEFENSES
from leakshield.experiment.cells import Cell
from leakshield.experiment.config import DefenseSetting, ExperimentConfig
from leakshield.experiment.store import ResultStore
from leakshield.models import MODELS
from leakshield.models.imported import identity
from leakshield.old_import_paths import new_path
from leakshield.registry import Registry

#: where every cell's computation starts (its closure is the shared core)
CORE_ROOTS = ("leakshield.experiment.compute",)
#: config sections that are grid axes or do not compute (they never stale a computed cell)
NOT_SETTINGS = {"name", "seeds", "models", "defenses", "attacks", "axes", "report", "execution", "dataset"}


@dataclass(frozen=True)
class ComponentCode:
    """One component of a cell: ``kind`` (core, dataset, model, defense, attack), ``name`` (its label in
    the config), the modules it reaches with their content hashes, and its settings."""

    kind: str
    name: str
    modules: dict[str, str]
    settings: Any

    @property
    def stamp(self) -> str:
        """16 hex digits over the modules' contents (not their names) and the settings."""
        blob = json.dumps({"code": sorted(self.modules.values()), "settings": self.settings}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "modules": self.modules, "settings": self.settings}


def home_modules(registry: Registry, name: str) -> list[str]:
    """The modules a registered component starts from: its factory's and its parameter model's."""
    entry = registry.get(name)
    return sorted({entry.factory.__module__, entry.params.__module__})


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


class ComponentStamper:
    """Stamps the cells of one grid as the given code graph (default: the installed package) would compute
    them; a component is built once per (kind, name) and shared between cells. A grid's stamper says
    which components a cell runs through (:meth:`components`): the image grid's :class:`Stamper`, the
    text grid's :class:`~leakshield.text_grid.stamps.TextStamper`."""

    def __init__(self, graph: CodeGraph | None = None) -> None:
        self.graph = graph or installed_graph()
        self._made: dict[tuple[str, str], ComponentCode] = {}

    def _component(self, kind: str, name: str, roots: list[str], settings: Any) -> ComponentCode:
        key = (kind, name)
        if key not in self._made:
            self._made[key] = ComponentCode(kind, name, self.graph.closure(roots), _json(settings))
        return self._made[key]

    @staticmethod
    def _settings(shared: dict[str, Any], axes: dict[str, str]) -> dict[str, Any]:
        """A config's shared sections as settings: ``axes`` (section → key) popped, since another value of
        an axis is another cell, and a section those pops leave empty dropped (it is no setting)."""
        for section, key in axes.items():
            (shared.get(section) or {}).pop(key, None)
        return {k: v for k, v in shared.items() if v != {}}

    def _registered(
        self, kind: str, label: str, registry: Registry, name: str, settings: Any
    ) -> ComponentCode:
        """A registered component (``registry``'s ``name``, labelled ``label`` in the config)."""
        return self._component(kind, label, home_modules(registry, name), settings)

    def _defense(self, defense: DefenseSetting) -> ComponentCode:
        """A defense setting: every defense of its stack, and its client training."""
        roots = sorted({m for e in defense.entries for m in home_modules(DEFENSES, e["name"])})
        training = (
            None if defense.training is None else defense.training.model_dump(mode="json", exclude_unset=True)
        )
        return self._component(
            "defense", defense.display, roots, {"stack": defense.entries, "training": training}
        )

    def components(self, cell: Any) -> dict[str, ComponentCode]:
        """Every component ``cell`` runs through, by kind."""
        raise NotImplementedError

    def stamps(self, cell: Any) -> dict[str, str]:
        """``{kind: stamp}`` of ``cell``'s components (stored in the cell's ``environment``)."""
        return {kind: c.stamp for kind, c in self.components(cell).items()}


class Stamper(ComponentStamper):
    """The components of the cells of one image ``config``: the shared core, the dataset, the model, the
    defense setting and the attack."""

    def __init__(self, config: ExperimentConfig, graph: CodeGraph | None = None) -> None:
        super().__init__(graph)
        self.config = config
        # defaults left out: a setting written out at its default value computes the same cell (and a run
        # directory's stored config, written out in full, stamps as the config it came from)
        shared = config.model_dump(mode="json", exclude_defaults=True, exclude=NOT_SETTINGS)
        self._shared = self._settings(shared, {"attack": "rounds"})  # ``attack: {rounds: …}`` alone: none

    def components(self, cell: Cell) -> dict[str, ComponentCode]:
        """Every component ``cell`` runs through, by kind."""
        dataset = self.config.dataset
        found = {
            "core": self._component("core", "core", list(CORE_ROOTS), self._shared),
            "dataset": self._registered(
                "dataset", dataset.name, DATASETS, dataset.name, {"name": dataset.name, **dataset.params}
            ),
        }
        if cell.model is not None:
            model = cell.model
            found["model"] = self._component(
                "model", model.display, home_modules(MODELS, model.name), identity(model.name, model.params)
            )
        if cell.defense is not None:
            found["defense"] = self._defense(cell.defense)
        if cell.attack is not None:
            attack = cell.attack
            method, _ = split_execution(attack.params)  # how it runs is not what it computes
            found["attack"] = self._registered(
                "attack", attack.display, ATTACKS, attack.name, {"name": attack.name, **method}
            )
        return found


def stale_kinds(stored: dict[str, str] | None, current: dict[str, str]) -> list[str]:
    """The kinds whose stamps differ (every kind when nothing was stored)."""
    if not stored:
        return sorted(current)
    return sorted(k for k in {*stored, *current} if stored.get(k) != current.get(k))


def module_changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """What changed between two module → content maps, in words (``leakshield.defenses.noise edited``);
    a module whose content reappears under another name was moved, which is no change, and a module
    moved to its new path (:mod:`leakshield.old_import_paths`) and edited reads as edited there."""
    moved = set(before.values()) & set(after.values())
    renamed = {m: new_path(m) for m in before.keys() - after.keys() if new_path(m) in after}
    words = [f"{m} edited" for m in sorted(before.keys() & after.keys()) if before[m] != after[m]]
    words += [f"{m} edited (now {n})" for m, n in sorted(renamed.items()) if before[m] != after[n]]
    words += [
        f"{m} added"
        for m in sorted(after.keys() - before.keys() - set(renamed.values()))
        if after[m] not in moved
    ]
    words += [
        f"{m} removed" for m in sorted(before.keys() - after.keys() - set(renamed)) if before[m] not in moved
    ]
    return words


def unstamped_fresh(environment: dict[str, Any], tree: str) -> bool:
    """A cell stored before stamps existed is fresh only when the whole source tree that computed it
    (:func:`leakshield.provenance.tree_hash`, in its environment) is ``tree``, the code judging it."""
    return environment.get("source") == tree


def stale_keys(store: ResultStore, stamps: dict[str, dict[str, str]]) -> set[str]:
    """Stored cells of the grid that the installed code would compute differently: their stamps differ,
    or they carry none and another source tree computed them."""
    from leakshield.provenance import source_hash

    stale = set()
    for record in store.records():
        if record.key not in stamps:
            continue
        stored = record.environment.get("components")
        unknown = stored is None and not unstamped_fresh(record.environment, source_hash())
        if unknown or (stored is not None and stored != stamps[record.key]):
            stale.add(record.key)
    return stale
