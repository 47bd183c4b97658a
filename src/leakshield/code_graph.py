"""The package's own import graph, read from its source files without importing them: each module's
content hash and the package modules it imports. A result's provenance is the content of the modules
its components reach through this graph (:mod:`leakshield.experiment.stamps`), so that an edit stales
only the results computed through the edited module.

A module's content hash ignores what cannot change a number or only names a place: comments, blank
lines, docstrings and the statements importing the package's own modules (what they bring in is
hashed as modules of their own). Moving a module, or adding one, therefore changes no hash of the
modules that existed. Import edges resolve names through package ``__init__`` files to the module
that defines them, and a package ``__init__`` importing its own submodules to register them (the
registries' pattern) adds no edge: an attack's closure does not reach every other attack."""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "leakshield"
#: modules that record results but compute none (their edits must not stale a published table)
RECORD_KEEPING = ("leakshield.provenance", "leakshield.code_graph")


@dataclass(frozen=True)
class ModuleInfo:
    """One module: its content hash, and per name it binds from a package module, where that name
    comes from (``(module, name)``; ``name`` None for a whole module)."""

    name: str
    path: Path
    digest: str
    is_package: bool
    imports: tuple[tuple[str, str | None], ...]


def _is_internal(module: str | None) -> bool:
    return module is not None and (module == PACKAGE or module.startswith(PACKAGE + "."))


def _imports_package(node: ast.AST) -> bool:
    """Whether ``node`` is an import statement of the package's own modules (only)."""
    if isinstance(node, ast.Import):
        return all(_is_internal(a.name) for a in node.names)
    return isinstance(node, ast.ImportFrom) and node.level == 0 and _is_internal(node.module)


def _dropped_lines(tree: ast.Module, lines: list[str]) -> set[int]:
    """1-based lines of docstrings and of imports of the package's own modules (whole lines only)."""
    spans: list[ast.AST] = []
    for node in ast.walk(tree):
        if _imports_package(node):
            spans.append(node)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                spans.append(first)
    dropped: set[int] = set()
    for node in spans:
        start, end = node.lineno, node.end_lineno or node.lineno  # type: ignore[attr-defined]
        head, tail = lines[start - 1], lines[end - 1]
        alone = not head[: node.col_offset].strip() and not tail[node.end_col_offset :].split("#")[0].strip()  # type: ignore[attr-defined]
        if alone:
            dropped.update(range(start, end + 1))
    return dropped


def normalized_source(text: str) -> str:
    """``text`` without comments, blank lines, trailing spaces, docstrings and package imports."""
    tree = ast.parse(text)
    lines = text.splitlines()
    comments: dict[int, int] = {}
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.start[1]
    dropped = _dropped_lines(tree, lines)
    kept = []
    for number, line in enumerate(lines, start=1):
        if number in dropped:
            continue
        line = line[: comments[number]] if number in comments else line
        if line.strip():
            kept.append(line.rstrip())
    return "\n".join(kept) + "\n"


def _bindings(tree: ast.Module) -> list[tuple[str, str, str | None]]:
    """(bound name, source module, source name or None for a module) of every package import."""
    found: list[tuple[str, str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_internal(alias.name):
                    found.append((alias.asname or alias.name, alias.name, None))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _is_internal(node.module):
            for alias in node.names:
                found.append((alias.asname or alias.name, str(node.module), alias.name))
    return found


def _module_name(root: Path, path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(root).with_suffix("").parts)
    package = parts[-1] == "__init__"
    if package:
        parts = parts[:-1]
    return ".".join([PACKAGE, *parts]), package


class CodeGraph:
    """The modules of the package at ``root`` (the folder holding its ``__init__.py``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.modules: dict[str, ModuleInfo] = {}
        self._trees: dict[str, ast.Module] = {}
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            name, package = _module_name(root, path)
            text = path.read_text(encoding="utf-8")
            tree = ast.parse(text)
            self._trees[name] = tree
            digest = hashlib.sha256(normalized_source(text).encode()).hexdigest()[:16]
            imports = tuple((module, source) for _, module, source in _bindings(tree))
            self.modules[name] = ModuleInfo(name, path, digest, package, imports)

    @functools.cache  # noqa: B019  (one graph per root, kept for the process)
    def _defined_in(self, module: str, name: str, depth: int = 0) -> str:
        """The module that defines ``name`` as seen from ``module`` (re-exports followed)."""
        info = self.modules.get(module)
        if info is None or not info.is_package or depth > 20:
            return module
        for bound, source, source_name in _bindings(self._trees[module]):
            if bound == name and source_name is not None and source in self.modules:
                return self._defined_in(source, source_name, depth + 1)
            if bound == name and source_name is None and source in self.modules:
                return source
        return module

    def edges(self, module: str) -> set[str]:
        """The package modules ``module`` depends on (see the module docstring for the rules)."""
        info = self.modules[module]
        out: set[str] = set()
        for source, name in info.imports:
            if name is not None and f"{source}.{name}" in self.modules:  # a submodule, as a module
                if info.is_package and source == module:
                    continue  # the package registering its own submodule
                out.add(f"{source}.{name}")
            elif name is not None:
                out.add(self._defined_in(source, name))
            else:
                target = source
                while target not in self.modules and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in self.modules and not (info.is_package and target.startswith(module + ".")):
                    out.add(target)
        out.discard(module)
        return {m for m in out if m in self.modules and m not in RECORD_KEEPING}

    def closure(self, roots: Iterable[str]) -> dict[str, str]:
        """Every module reachable from ``roots`` (included), with its content hash."""
        seen: dict[str, str] = {}
        todo = [r for r in roots if r in self.modules]
        while todo:
            module = todo.pop()
            if module in seen:
                continue
            seen[module] = self.modules[module].digest
            todo.extend(self.edges(module) - seen.keys())
        return dict(sorted(seen.items()))


@functools.cache
def installed_graph() -> CodeGraph:
    """The graph of the installed package (read once per process)."""
    return CodeGraph(Path(__file__).resolve().parent)
