"""The shape of the package: modules stay small, and the runner and the FL layer have no code path for a
particular defense or attack (everything they need comes through the stages, the registries' metadata
and the participants' protocol)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from leakshield.attacks import ATTACKS
from leakshield.defenses import DEFENSES

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "leakshield"
GENERIC = PACKAGE.glob("experiment/*.py"), PACKAGE.glob("fl/*.py")


def test_no_module_is_over_400_lines():
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert {name: n for name, n in sizes.items() if n > 400} == {}


def _component_names() -> set[str]:
    names = set()
    for registry in (ATTACKS, DEFENSES):
        for entry in registry:
            names.update({entry.name, *entry.aliases})
    names.discard("none")  # "no defense", the default of a config
    return names | {n.replace("-", "_") for n in names}


def _code_words(source: str) -> list[str]:
    """Identifiers and string constants of ``source``, docstrings excluded (they may cite examples)."""
    tree = ast.parse(source)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    words = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words.append(node.value)
        elif isinstance(node, ast.Name):
            words.append(node.id)
        elif isinstance(node, ast.Attribute):
            words.append(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef | ast.alias):
            words.append(node.name)
    return words


@pytest.mark.parametrize("path", [p for group in GENERIC for p in group], ids=lambda p: p.name)
def test_the_runner_and_the_fl_layer_name_no_defense_or_attack(path):
    names = _component_names()
    pattern = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, sorted(names))) + r")(?![\w-])")
    found = {m.group(1) for word in _code_words(path.read_text()) for m in pattern.finditer(word)}
    assert not found, f"{path.name} names {sorted(found)}"
