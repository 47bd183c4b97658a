"""The import paths of leakshield 0.2 keep working after the attacks and the client guards moved into
folders by role: every module path of 0.2 imports and has every public name it had
(``tests/data/import_paths_0.2.json``, read from the 0.2 tree before the move), as the very object at
its new path."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from leakshield.old_import_paths import BECAME_PACKAGE, MOVED, new_path, old_path

PATHS = json.loads((Path(__file__).parent / "data" / "import_paths_0.2.json").read_text())


@pytest.mark.parametrize("module", sorted(PATHS))
def test_every_public_path_of_0_2_still_imports(module: str) -> None:
    try:
        found = importlib.import_module(module)
    except ModuleNotFoundError as exc:  # an optional extra (flwr, ray) not installed here
        if (exc.name or "").startswith("leakshield"):
            raise
        pytest.skip(f"{module} needs {exc.name}")
    missing = [name for name in PATHS[module] if not hasattr(found, name)]
    assert not missing, f"{module} lost {missing}"
    moved = new_path(module)
    if moved is not None:
        now = importlib.import_module(moved)
        assert all(getattr(found, n) is getattr(now, n) for n in PATHS[module])  # one object, not a copy
        if module in MOVED:
            assert found is now and found.__spec__.name == moved


def test_every_moved_path_is_a_0_2_module_and_its_new_home_exists() -> None:
    for old, new in {**MOVED, **BECAME_PACKAGE}.items():
        assert old in PATHS, old
        assert importlib.util.find_spec(new) is not None, new
        assert old_path(new) == old
    assert new_path("leakshield.attacks.inversion.engine") == "leakshield.attacks.passive.inversion.engine"
    assert old_path("leakshield.attacks.prior.search") == "leakshield.attacks.ggl.search"
    assert new_path("leakshield.attacks.adaptive.ats") is None  # a new module, not the old one's


def test_an_old_path_imported_first_loads_no_second_copy() -> None:
    """In a fresh interpreter, the old path of a moved package's submodule imported before anything else
    is the new module (a second copy would register its attacks twice and break ``isinstance``)."""
    code = (
        "import sys\n"
        "from leakshield.attacks.inversion.engine import GradientInversion as Old\n"
        "from leakshield.defenses.row_guard import RowGuard\n"
        "from leakshield.attacks.passive.inversion.engine import GradientInversion as New\n"
        "from leakshield.defenses import DEFENSES\n"
        "assert Old is New and DEFENSES.get('row-guard').factory is RowGuard\n"
        "copies = [m for m in sys.modules.values() if getattr(m, '__file__', None)\n"
        "          and m.__file__.endswith(('inversion/engine.py', 'guards/row_guard.py'))]\n"
        "print(len({id(m) for m in copies}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2"  # one engine module and one row-guard module


def test_a_moved_submodule_of_0_2_is_an_attribute_of_its_old_parent() -> None:
    """``import leakshield.attacks`` then ``leakshield.attacks.imprint`` (0.2's packages imported their
    submodules), in a fresh interpreter; and an old path that never existed is unknown."""
    code = (
        "import importlib, importlib.util\n"
        "from leakshield.old_import_paths import MOVED\n"
        "for old, new in sorted(MOVED.items()):\n"
        "    parent, _, child = old.rpartition('.')\n"
        "    found = getattr(importlib.import_module(parent), child)\n"
        "    assert found is importlib.import_module(new), old\n"
        "assert importlib.util.find_spec('leakshield.attacks.inversion.nothing') is None\n"
        "assert importlib.util.find_spec('leakshield.attacks.inversion').submodule_search_locations\n"
        "print(len(MOVED))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == len(MOVED)
