"""A user's own network as a model: ``import:my_pkg.nets:make_net`` names a factory (a function or an
``nn.Module`` class) in the user's package or in a module of the working directory, and works wherever
a registered model's name does (configs, grids, worker processes, membership).

A config writes it ``{import: "my_pkg.nets:make_net", <param>: …}`` (or with ``params:``); the
parameters are passed to the factory as keywords, together with ``num_classes`` and ``in_shape`` (C, H,
W) when its signature takes them and the config does not set them. The working directory is searched
after the installed packages, as ``python -c`` does not (a worker process started there finds the same
module). ``local:`` names are factories handed over in this process (:func:`register_local`: the Python
API with a class defined inside a function); worker processes cannot rebuild them.

A cell's stamp of such a model hashes the source file that defines the factory (its compiled code
where there is no file), so editing the network recomputes the cells it computed; edits to other
modules that file imports are not seen (rerun with a new ``name``, or delete the run folder)."""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pydantic
from torch import nn

from leakshield.errors import ConfigError
from leakshield.registry import Entry, Params

#: the prefix of an imported model's name (``import:my_pkg.nets:make_net``)
IMPORT_PREFIX = "import:"
#: the prefix of a factory handed over in this process (:func:`register_local`)
LOCAL_PREFIX = "local:"
#: keywords a factory receives from leakshield when its signature takes them
CONTEXT = ("num_classes", "in_shape")

_LOCAL: dict[str, Callable[..., nn.Module]] = {}


class ImportedParams(Params):
    """Whatever keywords the user's factory takes (JSON values: they are part of the run's key)."""

    model_config = pydantic.ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)


def is_user_model(name: str) -> bool:
    """Whether ``name`` names a user's factory rather than a registered model."""
    return name.startswith((IMPORT_PREFIX, LOCAL_PREFIX))


def short_name(name: str) -> str:
    """The factory's own name (``import:my_pkg.nets:make_net`` → ``make_net``): a model's default label."""
    return name.rsplit(":", 1)[-1].rsplit(".", 1)[-1]


def register_local(factory: Callable[..., nn.Module]) -> str:
    """Hand ``factory`` over in this process; returns its ``local:`` name: its qualified name and a
    digest of what it captured (:func:`captured`: a closure's values, defaults, a partial's arguments),
    stable for the same factory, so that a rerun of the same script resumes."""
    if not callable(factory):
        raise ConfigError(f"model: {factory!r} is neither an nn.Module class nor a function that builds one")
    inner = factory
    while isinstance(inner, functools.partial):
        inner = inner.func
    module = getattr(inner, "__module__", None) or "local"
    where = f"{module}:{getattr(inner, '__qualname__', type(inner).__name__)}"
    name = f"{LOCAL_PREFIX}{where}#{hashlib.sha256(captured(factory)).hexdigest()[:8]}"
    _LOCAL[name] = factory
    return name


def load_factory(name: str) -> Callable[..., nn.Module]:
    """The factory ``name`` refers to; :class:`ConfigError` with the reason in one line."""
    if name.startswith(LOCAL_PREFIX):
        if name not in _LOCAL:
            raise ConfigError(
                f"model {name!r} was handed over in another process (leakshield.audit), which neither a "
                "worker nor the command line can rebuild; rerun the Python call with one worker, or put "
                "the model in a module and name it import:module:name"
            )
        return _LOCAL[name]
    path = name.removeprefix(IMPORT_PREFIX)
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute or ":" in attribute:
        raise ConfigError(f"model.import {path!r}: expected 'module:name' (e.g. my_pkg.nets:make_net)")
    here = os.getcwd()
    if here not in sys.path:
        sys.path.append(here)  # after the installed packages: a local file never shadows one
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ConfigError(
                f"model.import {path!r}: no module {exc.name!r} in the installed packages or "
                f"the working directory {here}"
            ) from None
        raise ConfigError(
            f"model.import {path!r}: importing {module_name} failed: {exception_line(exc)}"
        ) from None
    except Exception as exc:  # the user's module raised while importing
        raise ConfigError(
            f"model.import {path!r}: importing {module_name} failed: {exception_line(exc)}"
        ) from None
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            found = sorted(
                n
                for n, v in vars(module).items()
                if callable(v) and not n.startswith("_") and getattr(v, "__module__", None) == module_name
            )
            raise ConfigError(
                f"model.import {path!r}: {module_name} has no {attribute!r}; it defines "
                f"{', '.join(found) or 'no function or class'}"
            )
        target = getattr(target, part)
    if not callable(target):
        raise ConfigError(
            f"model.import {path!r}: {attribute} is a {type(target).__name__}, not an "
            "nn.Module class or a function that builds one"
        )
    return target


def build(name: str, params: dict[str, Any], in_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """Call the factory of ``name`` with ``params`` and the context keywords its signature takes."""
    factory = load_factory(name)
    kwargs = dict(params)
    context = {"num_classes": num_classes, "in_shape": tuple(in_shape)}
    try:
        signature = inspect.signature(factory)
        takes_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
        for key in CONTEXT:
            if key not in kwargs and (key in signature.parameters or takes_any):
                kwargs[key] = context[key]
    except (TypeError, ValueError):  # no signature to read (a C extension): parameters only
        pass
    label = short_name(name)
    try:
        model = factory(**kwargs)
    except Exception as exc:
        shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        raise ConfigError(f"model {label}({shown}) raised {exception_line(exc)}") from None
    if not isinstance(model, nn.Module):
        raise ConfigError(f"model {label}(…) returned a {type(model).__name__}, not a torch.nn.Module")
    return model


def code_hash(name: str) -> str:
    """16 hex digits over the code of the factory of ``name``: the source file that defines it, and what
    it captured (:func:`captured`); where there is no file — a class typed in ``__main__``, a notebook —
    its compiled code, every method's bytecode and constants."""
    factory = load_factory(name)
    digest = hashlib.sha256(name.encode())
    digest.update(captured(factory))
    while isinstance(factory, functools.partial):
        factory = factory.func
    try:
        path = inspect.getsourcefile(factory)
        digest.update(Path(path).read_bytes() if path else b"")
        found = bool(path)
    except (OSError, TypeError):
        found = False
    if not found:
        digest.update(compiled(factory))
    return digest.hexdigest()[:16]


def captured(obj: Any, depth: int = 0) -> bytes:
    """What a factory holds beyond its code: a ``functools.partial``'s arguments, a function's defaults
    and closure values, a class's plain attributes and its bases' (their ``repr``; an object whose repr
    names its address makes the key new in every process — recomputed, never reused wrongly)."""
    if depth > 8:
        return b""
    if isinstance(obj, functools.partial):
        return repr((obj.args, sorted(obj.keywords.items()))).encode() + captured(obj.func, depth + 1)
    if inspect.isclass(obj):
        plain = sorted(
            (k, repr(v))
            for k, v in vars(obj).items()
            if not callable(v) and not k.startswith("__") and k != "_abc_impl"
        )
        bases = b"".join(
            captured(b, depth + 1) + compiled(b)
            for b in obj.__bases__
            if b.__module__ not in ("builtins", "torch.nn.modules.module")
        )
        return repr(plain).encode() + bases
    function = getattr(obj, "__func__", obj)
    cells = [c.cell_contents for c in getattr(function, "__closure__", None) or () if _filled(c)]
    return repr(
        (getattr(function, "__defaults__", None), getattr(function, "__kwdefaults__", None), cells)
    ).encode()


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:  # an empty cell
        return False
    return True


def compiled(obj: Any, depth: int = 0) -> bytes:
    """The compiled code of a function, or of every function and nested class of a class: bytecode,
    constants (nested code objects opened) and names."""
    if depth > 8:
        return b""
    if inspect.isclass(obj):
        members = sorted(vars(obj).items(), key=lambda item: item[0])
        return b"".join(compiled(value, depth + 1) for _, value in members)
    code = getattr(getattr(obj, "__func__", obj), "__code__", None)
    return b"" if code is None else _code_bytes(code)


def _code_bytes(code: Any) -> bytes:
    parts = [code.co_code, repr(code.co_names).encode()]
    for const in code.co_consts:
        parts.append(_code_bytes(const) if inspect.iscode(const) else repr(const).encode())
    return b"".join(parts)


def exception_line(exc: BaseException) -> str:
    """``Type: message`` on one line (the type alone for an empty message)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def imported_entry(name: str) -> Entry[nn.Module] | None:
    """The registry entry of a user's factory (None for every other name): the model registry's
    resolver."""
    if not is_user_model(name):
        return None
    load_factory(name)  # a bad path is one line now, not at build time

    def factory(params: ImportedParams, *, in_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
        return build(name, dict(params.model_extra or {}), in_shape, num_classes)

    factory.__module__ = __name__
    return Entry(name, factory, f"{short_name(name)}: a user's model", params=ImportedParams)


def model_entry(value: Any) -> Any:
    """A model as a config writes it, with ``import: module:name`` turned into the name
    ``import:module:name`` (labelled with the factory's own name unless given); other values as they
    are."""
    if not isinstance(value, dict) or "import" not in value:
        return value
    if "name" in value:
        raise ValueError("give a model either a registered 'name' or an 'import' path, not both")
    path = value["import"]
    if not isinstance(path, str) or not path:
        raise ValueError(f"import: expected 'module:name' (e.g. my_pkg.nets:make_net), got {path!r}")
    rest = {k: v for k, v in value.items() if k != "import"}
    return {"name": IMPORT_PREFIX + path, "label": rest.pop("label", None) or short_name(path), **rest}


def identity(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """What identifies a model's parameters for fitted artifacts: name and parameters, and for a user's
    model the hash of its source (:func:`code_hash`)."""
    return {"name": name, **params, **({"code": code_hash(name)} if is_user_model(name) else {})}
