"""The package's own import graph, read from its source files without importing them: each module's
content hash and the package modules it imports. A result's provenance is the content of the modules
its components reach through this graph (:mod:`leakshield.experiment.stamps`), so that an edit stales
only the results computed through the edited module.

A module's content hash ignores what cannot change a number or only names a place: comments, blank
lines, docstrings, ``__version__``, and the module paths of the statements importing the package's own
modules — an import keeps the names it binds (``import ssim as psnr`` is hashed as that), in sorted
order within its run of consecutive imports (an import sorter reorders them after a move), and what it
brings in is hashed as a module of its own. Moving a module, or adding one, therefore changes no hash
of the modules that existed. Import edges resolve names through package ``__init__`` files to the
module that defines them; a module's parent packages are reached too (their ``__init__`` runs first),
hashed without their imports and ``__all__`` (what they register or re-export is hashed where it is
defined); and a package ``__init__`` importing its own submodules to register them (the registries'
pattern) adds no edge: an attack's closure does not reach every other attack, and registering a new
one changes nothing that existed. Not tracked: a name a package ``__init__`` re-exports under another
name's alias, and module-level side effects of modules reached only through a parent's re-exports."""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from leakshield.old_import_paths import old_path

PACKAGE = "leakshield"
#: modules that record results but compute none (their edits must not stale a published table)
RECORD_KEEPING = ("leakshield.provenance", "leakshield.code_graph", "leakshield.old_import_paths")
#: the content hash of a module with nothing left to hash
EMPTY = hashlib.sha256(b"\n").hexdigest()[:16]


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


def _bindings_of(node: ast.Import | ast.ImportFrom) -> list[str]:
    """What a package import binds, without the module path: ``name as bound`` per name
    (``<module> as bound`` for a whole module)."""
    if isinstance(node, ast.ImportFrom):
        return [f"{a.name} as {a.asname or a.name}" for a in node.names]
    return [f"<module> as {a.asname or a.name}" for a in node.names]


def _is_metadata(node: ast.AST, package: bool) -> bool:
    """``__version__ = "…"`` (every cell records it in its environment) and a package's ``__all__``:
    never hashed."""
    names = [getattr(t, "id", None) for t in node.targets] if isinstance(node, ast.Assign) else []
    return names == ["__version__"] or (package and names == ["__all__"])


def _import_runs(tree: ast.Module) -> list[list[ast.stmt]]:
    """Maximal runs of consecutive package-import statements in one statement list (a module's, a
    function's, a branch's): an import sorter reorders imports within such a run, never across code."""
    runs: list[list[ast.stmt]] = []
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            statements = getattr(node, field, None)
            if not isinstance(statements, list):
                continue
            run: list[ast.stmt] = []
            for statement in [*statements, None]:
                if statement is not None and _imports_package(statement):
                    run.append(statement)
                elif run:
                    runs.append(run)
                    run = []
    return runs


def _whole_lines(node: ast.AST, lines: list[str]) -> tuple[int, int, str] | None:
    """(first line, last line, indentation) of a statement alone on its lines; None if it shares a line
    with other code (then it is hashed as written)."""
    start, end = node.lineno, node.end_lineno or node.lineno  # type: ignore[attr-defined]
    before = lines[start - 1][: node.col_offset]  # type: ignore[attr-defined]
    after = lines[end - 1][node.end_col_offset :]  # type: ignore[attr-defined]
    if before.strip() or after.split("#")[0].strip():
        return None
    return start, end, before


def _replaced_lines(tree: ast.Module, lines: list[str], package: bool) -> dict[int, str | None]:
    """1-based line → its replacement (None: dropped): docstrings and metadata dropped; each run of
    package imports replaced, where its first import stood, by the names the run binds, sorted (dropped
    in a package ``__init__``, whose imports register submodules or re-export names: an import through
    the package is followed to the module that defines the name; see :meth:`CodeGraph.edges`)."""
    dropped: list[ast.AST] = []
    for node in ast.walk(tree):
        if _is_metadata(node, package):
            dropped.append(node)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                dropped.append(first)
    replaced: dict[int, str | None] = {}
    for node in dropped:
        found = _whole_lines(node, lines)
        if found is not None:
            replaced.update(dict.fromkeys(range(found[0], found[1] + 1)))
    for run in _import_runs(tree):
        placed = [(found, node) for node in run if (found := _whole_lines(node, lines)) is not None]
        bound = sorted(b for _, node in placed for b in _bindings_of(node))  # type: ignore[arg-type]
        for (start, end, _), _node in placed:
            replaced.update(dict.fromkeys(range(start, end + 1)))
        if placed and not package:
            (start, _, indent), _ = placed[0]
            replaced[start] = indent + "import " + ", ".join(bound)
    return replaced


def normalized_source(text: str, package: bool = False) -> str:
    """``text`` without comments, blank lines, trailing spaces, docstrings and ``__version__``, each run
    of consecutive package imports reduced to the names it binds, in sorted order (``package``: a
    package's ``__init__``, whose package imports and ``__all__`` are dropped: what they register or
    re-export is hashed where it is defined)."""
    tree = ast.parse(text)
    lines = text.splitlines()
    comments: dict[int, int] = {}
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.start[1]
    replaced = _replaced_lines(tree, lines, package)
    kept = []
    for number, line in enumerate(lines, start=1):
        if number in replaced:
            line = replaced[number] or ""
        elif number in comments:
            line = line[: comments[number]]
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
        found = {}
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" not in path.parts:
                found[_module_name(root, path)] = path
        for (name, package), path in found.items():
            text = path.read_text(encoding="utf-8")
            tree = ast.parse(text)
            self._trees[name] = tree
            digest = hashlib.sha256(normalized_source(text, package).encode()).hexdigest()[:16]
            imports = tuple((module, source) for _, module, source in _bindings(tree))
            self.modules[name] = ModuleInfo(name, path, digest, package, imports)

    def present(self, module: str) -> str:
        """``module``'s name in this graph: a graph of the code from before the folders by role finds a
        moved module at its old path (:mod:`leakshield.old_import_paths`)."""
        if module in self.modules:
            return module
        return old_path(module) or module

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
        """Every module reachable from ``roots`` (included), with its content hash. Importing a module
        runs its parent packages' ``__init__`` first, so their own content is included too; what a
        parent merely re-exports is followed only when an import reaches the parent itself. Modules
        with nothing left to hash (an ``__init__`` of imports and a docstring) are left out, so that
        moving a module into a new package changes nothing."""
        seen: dict[str, str] = {}
        expanded: set[str] = set()
        todo = [m for m in map(self.present, roots) if m in self.modules]
        while todo:
            module = todo.pop()
            if module in expanded or module in RECORD_KEEPING:
                continue
            expanded.add(module)
            for name in [module, *(module.rsplit(".", k)[0] for k in range(1, module.count(".") + 1))]:
                digest = self.modules[name].digest if name in self.modules else EMPTY
                if digest != EMPTY and name not in RECORD_KEEPING:  # a module without code runs nothing
                    seen[name] = digest
            todo.extend(self.edges(module) - expanded)
        return dict(sorted(seen.items()))


@functools.cache
def installed_graph() -> CodeGraph:
    """The graph of the installed package (read once per process)."""
    return CodeGraph(Path(__file__).resolve().parent)
