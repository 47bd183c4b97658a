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
    """Registered names and aliases of every attack and defense, their factories' class names and the
    modules they live in (e.g. ``hitaj``, ``HitajGAN``, ``imprint``), lower-cased: the generic layers
    must not name any of them, in any case."""
    names = set()
    for registry in (ATTACKS, DEFENSES):
        for entry in registry:
            names.update({entry.name, *entry.aliases})
            factory = entry.factory
            names.add(getattr(factory, "__name__", ""))
            names.add(getattr(factory, "__module__", "").rsplit(".", 1)[-1])
    names -= {"none", "", "base", "defense", "attack", "engine"}  # "no defense" and generic module names
    names = {n.lower() for n in names}
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
    assert not _named_components(path.read_text(), names), path.name


def _named_components(source: str, names: set[str]) -> set[str]:
    """Component names found in the code words of ``source``, case-insensitively: a whole word, or the
    start of a CamelCase identifier (``HitajGAN``, ``isinstance(attack, ImprintAttack)``)."""
    pattern = re.compile(r"(?<![a-z0-9-])(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True)))
                         + r")(?![a-z0-9-])")  # fmt: skip
    found = set()
    for word in _code_words(source):
        parts = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", word).lower()  # HitajGAN → hitaj_gan
        for text in {word.lower(), parts}:
            found |= {m.group(1) for m in pattern.finditer(text.replace("_", " "))}
            found |= {m.group(1) for m in pattern.finditer(text)}
    return found


def test_the_name_check_catches_a_class_or_a_name_in_any_case():
    """Break the architecture once: the check must see a specific attack's class, a name in capitals,
    and a registered name in an identifier."""
    names = _component_names()
    assert "hitaj" in _named_components("from x import HitajGAN\nisinstance(a, HitajGAN)", names)
    assert _named_components("kind = 'IMPRINT'", names) == {"imprint"}
    assert "imprintattack" in _named_components("ImprintAttack()", names) or "imprint" in _named_components(
        "ImprintAttack()", names
    )
    assert not _named_components("def run_server_attack(world, cell): return protocol(cell)", names)
