"""The import paths of leakshield 0.2, from before the attacks and the client guards moved into folders
by role: each old module path still imports, as the very module now at its new path (not a copy:
registries, classes and ``isinstance`` checks are shared). ``import leakshield`` installs the finder;
new code imports the new paths, which :data:`MOVED` lists. The provenance of results computed before the
move finds their modules through it too (:func:`old_path`)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

#: old module path → new; a moved package's submodules follow it (``inversion.engine`` too)
MOVED: dict[str, str] = {
    "leakshield.attacks.analytic": "leakshield.attacks.passive.analytic",
    "leakshield.attacks.labels": "leakshield.attacks.passive.labels",
    "leakshield.attacks.inversion": "leakshield.attacks.passive.inversion",
    "leakshield.attacks.imprint": "leakshield.attacks.active.imprint",
    "leakshield.attacks.loki": "leakshield.attacks.active.loki",
    "leakshield.attacks.trap_weights": "leakshield.attacks.active.trap_weights",
    "leakshield.attacks.fishing": "leakshield.attacks.active.fishing",
    "leakshield.attacks.feature_fishing": "leakshield.attacks.active.feature_fishing",
    "leakshield.attacks.seer": "leakshield.attacks.active.seer",
    "leakshield.attacks.seer_training": "leakshield.attacks.active.seer_training",
    "leakshield.attacks.guard_evasion": "leakshield.attacks.active.guard_evasion",
    "leakshield.attacks.cocktail_party": "leakshield.attacks.aggregate.cocktail_party",
    "leakshield.attacks.label_counts": "leakshield.attacks.aggregate.label_counts",
    "leakshield.attacks.ats_adaptive": "leakshield.attacks.adaptive.ats",
    "leakshield.attacks.dcs2_adaptive": "leakshield.attacks.adaptive.dcs2",
    "leakshield.attacks.loda_adaptive": "leakshield.attacks.adaptive.loda",
    "leakshield.attacks.precode_analytic": "leakshield.attacks.adaptive.precode",
    "leakshield.attacks.carlini": "leakshield.attacks.adaptive.carlini",
    "leakshield.attacks.ggl": "leakshield.attacks.prior",
    "leakshield.attacks.ggl.attack": "leakshield.attacks.prior.ggl",
    "leakshield.attacks.ggl.prior": "leakshield.attacks.prior.generator",
    "leakshield.attacks.gan": "leakshield.attacks.participant",
    "leakshield.defenses.row_guard": "leakshield.defenses.guards.row_guard",
    "leakshield.defenses.dominance_guard": "leakshield.defenses.guards.dominance_guard",
    "leakshield.defenses.drift_guard": "leakshield.defenses.guards.drift_guard",
    "leakshield.defenses.loss_guard": "leakshield.defenses.guards.loss_guard",
    "leakshield.defenses.guard_probe": "leakshield.defenses.guards.guard_probe",
    "leakshield.defenses.finite_check": "leakshield.defenses.guards.finite_check",
}
#: an old module whose path is now a package's, re-exporting its names (exact names only: the package's
#: other submodules came from elsewhere)
BECAME_PACKAGE: dict[str, str] = {"leakshield.attacks.adaptive": "leakshield.attacks.adaptive.inversion"}


#: the tables read backwards (new path → old), for :func:`old_path`
_MOVED_FROM = {new: old for old, new in MOVED.items()}
_BECAME_PACKAGE_FROM = {new: old for old, new in BECAME_PACKAGE.items()}


def _mapped(name: str, table: dict[str, str]) -> str | None:
    """``name`` through ``table``, a moved package's submodules following it."""
    parent = name
    while parent:
        if parent in table:
            return table[parent] + name[len(parent) :]
        parent = parent.rpartition(".")[0]
    return None


def new_path(old: str) -> str | None:
    """Where the code of the module once at ``old`` lives now (None: it did not move)."""
    return BECAME_PACKAGE.get(old) or _mapped(old, MOVED)


def old_path(new: str) -> str | None:
    """Where the module now at ``new`` lived in 0.2 (None: it did not move)."""
    return _BECAME_PACKAGE_FROM.get(new) or _mapped(new, _MOVED_FROM)


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module at its new path (its own spec kept)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.module: ModuleType | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        self.module = importlib.import_module(self.target)
        self._spec = self.module.__spec__
        return self.module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._spec  # the import system stamped the old path's spec on it


class OldPathFinder(importlib.abc.MetaPathFinder):
    """Finds the old path of a moved module. It must stay first on ``sys.meta_path`` (:func:`install`
    puts it there; a hook inserted before it later that handles ``leakshield`` names would find an old
    submodule path through the moved package's folder and load a second copy)."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        target_path = _mapped(fullname, MOVED)
        if target_path is None:
            return None
        found = importlib.util.find_spec(target_path)
        if found is None:  # an old path that never existed stays unknown
            return None
        package = found.submodule_search_locations is not None
        return importlib.machinery.ModuleSpec(fullname, _Alias(target_path), is_package=package)


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, OldPathFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, OldPathFinder())


def _old_submodules(package: str):
    """A package's ``__getattr__`` (PEP 562) that finds its submodules of 0.2 that moved, as
    attributes (``leakshield.attacks.imprint`` after ``import leakshield.attacks``)."""

    def module_getattr(name: str) -> ModuleType:
        if f"{package}.{name}" in MOVED:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return module_getattr


#: bound as ``__getattr__`` by the packages whose submodules moved (an import: it hashes as nothing)
attacks_getattr = _old_submodules("leakshield.attacks")
defenses_getattr = _old_submodules("leakshield.defenses")
ggl_getattr = _old_submodules("leakshield.attacks.ggl")  # bound by its new home, attacks.prior

install()
