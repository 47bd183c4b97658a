"""Name → component registries with validated parameters (registries, not if-chains).

Every dataset, model, defense, attack and metric is looked up by name. An entry carries a factory, an
optional pydantic model of its parameters, a one-line summary and its paper reference, so that
``leakshield list`` can teach what exists and a config error can name the bad field.
"""

from __future__ import annotations

import difflib
import inspect
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import pydantic

from leakshield.errors import ConfigError, LeakshieldError, UnknownNameError

T = TypeVar("T")


class Params(pydantic.BaseModel):
    """Base of every component's parameter model: unknown fields are errors, values are validated, and
    no number may be infinite or NaN (a component must never loop on, or fail late from, such a value)."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    def check_data(self, shape: tuple[int, int, int], num_classes: int) -> None:
        """Refuse, before any work, values that cannot work on images of ``shape`` (C, H, W) from
        ``num_classes`` classes: raise :class:`ValueError` with ``"field: why"``. Default: none."""


class NoParams(Params):
    """For components without parameters."""


def field_descriptions(params: type[Params]) -> dict[str, str]:
    """Each parameter's description: its pydantic ``Field(description=...)``, else the text its model's
    docstring (or a parent's) gives it in the ``name: what it does`` convention (``a, b: ...`` and
    ``a with b: ...`` describe several). One source for ``leakshield list -v``, errors and the manual."""
    found: dict[str, str] = {}
    for cls in params.__mro__:
        if isinstance(cls, type) and issubclass(cls, Params) and cls.__doc__:
            fields = _docstring_fields(inspect.cleandoc(cls.__doc__), set(params.model_fields))
            for name, text in fields.items():
                found.setdefault(name, text)
    return {
        name: " ".join((info.description or found.get(name, "")).split())
        for name, info in params.model_fields.items()
    }


def _docstring_fields(doc: str, names: set[str]) -> dict[str, str]:
    """``name: text`` runs of a docstring, for the given field names only."""
    doc = re.sub(r":\w+:`~?([^`]+)`", r"``\1``", " ".join(doc.split()))  # one line; Sphinx roles dropped
    word = r"`{0,2}(\w+)`{0,2}"
    anchor = re.compile(rf"(?<![\w`]){word}((?:(?:, | and | with ){word})*):\s")
    spans = []
    for match in anchor.finditer(doc):
        group = [match.group(1), *re.findall(r"\w+", match.group(2) or "")]
        group = [g for g in group if g not in ("and", "with")]
        if group and all(g in names for g in group):
            spans.append((match.start(), match.end(), group))
    out: dict[str, str] = {}
    for i, (_, end, group) in enumerate(spans):
        stop = spans[i + 1][0] if i + 1 < len(spans) else len(doc)
        text = doc[end:stop].strip().rstrip(" ;.,—-") + "."
        for name in group:
            out.setdefault(name, text if len(group) == 1 else f"({', '.join(group)}) {text}")
    return out


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered component."""

    name: str
    factory: Callable[..., T]
    summary: str
    reference: str = ""
    params: type[Params] = NoParams
    aliases: tuple[str, ...] = ()
    #: adaptive attacks: the defenses they are built against (a grid pairs them with those only)
    targets: tuple[str, ...] | None = None
    #: attacks: the declared threat model (:class:`leakshield.threats.Threat`)
    threat: Any = None

    def validate(self, params: Mapping[str, Any] | None) -> Params:
        """Validate ``params`` against the entry's parameter model; errors name field and allowed values."""
        try:
            return self.params(**(params or {}))
        except pydantic.ValidationError as exc:
            message = format_validation_error(exc, descriptions=field_descriptions(self.params))
            raise ConfigError(f"{self.name}: {message}") from None


def format_validation_error(
    exc: pydantic.ValidationError, prefix: str = "", descriptions: Mapping[str, str] | None = None
) -> str:
    """One line per problem, ``field: message``, joined by '; '; with ``descriptions``, a bad value of a
    described field also says what the field is (the words ``leakshield list -v`` shows)."""
    parts = []
    for err in exc.errors():
        loc = ".".join(_location(p) for p in (prefix, *err["loc"]) if p != "")
        msg = " ".join(str(err["msg"]).split())  # one line, whatever the value held
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        elif err["type"] == "value_error":  # our own validators' messages, without pydantic's prefix
            msg = msg.removeprefix("Value error, ")
        about = (descriptions or {}).get(str(err["loc"][0])) if err["loc"] else None
        if about and err["type"] != "extra_forbidden":
            msg += f" ({err['loc'][0]}: {_shortened(about)})"
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


def _shortened(text: str, limit: int = 90) -> str:
    """The first sentence of ``text``, cut at ``limit`` characters."""
    first = text.split(". ")[0].rstrip(".")
    return first if len(first) <= limit else first[: limit - 1].rstrip() + "…"


def _location(part: object) -> str:
    """A field name as it can be shown on one line (quoted when it holds spaces or control characters)."""
    text = str(part)
    return text if text.isprintable() and text.strip() == text and text else repr(text)


class Registry(Generic[T]):
    """A named collection of components, e.g. ``MODELS.create("lenet", ...)``."""

    def __init__(self, kind: str, *, requires_threat: bool = False) -> None:
        self.kind = kind
        #: every entry must declare a threat model (the attack registry)
        self.requires_threat = requires_threat
        self._entries: dict[str, Entry[T]] = {}
        self._aliases: dict[str, tuple[str, dict[str, Any]]] = {}
        #: functions that build an entry for a name no registration holds (None: not theirs), e.g. the
        #: model registry's ``import:my_pkg.nets:make_net``
        self._resolvers: list[Callable[[str], Entry[T] | None]] = []

    def add_resolver(self, resolver: Callable[[str], Entry[T] | None]) -> None:
        """Consult ``resolver`` for names that are not registered (it returns None for names not its
        own, or raises :class:`ConfigError` with the reason a name of its own cannot be built)."""
        self._resolvers.append(resolver)

    def register(
        self,
        name: str,
        *,
        summary: str,
        reference: str = "",
        params: type[Params] = NoParams,
        aliases: Mapping[str, Mapping[str, Any]] | None = None,
        targets: tuple[str, ...] | None = None,
        threat: Any = None,
    ) -> Callable[[Callable[..., T]], Callable[..., T]]:
        """Decorator registering ``factory(**validated_params_and_context)`` under ``name``.

        ``aliases`` maps an alternative name to parameter defaults it implies (e.g. ``dmlp`` →
        ``{"hidden_layers": 4}``). ``targets`` (adaptive attacks): the component names it is built
        against. ``threat``: an attack's declared :class:`~leakshield.threats.Threat` (required by the
        attack registry).
        """
        if self.requires_threat and threat is None:
            raise ValueError(f"{self.kind} {name!r}: declare its threat model (threat=...)")

        def decorator(factory: Callable[..., T]) -> Callable[..., T]:
            if name in self._entries or name in self._aliases:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = Entry(
                name, factory, summary, reference, params, tuple(aliases or ()), targets, threat
            )
            for alias, implied in (aliases or {}).items():
                self._aliases[alias] = (name, dict(implied))
            return factory

        return decorator

    def unregister(self, name: str) -> None:
        """Remove ``name`` and its aliases (plug-ins and tests that register temporary components)."""
        self._entries.pop(name)
        self._aliases = {a: t for a, t in self._aliases.items() if t[0] != name}

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        if name in self._entries or name in self._aliases:
            return True
        try:
            return isinstance(name, str) and any(r(name) is not None for r in self._resolvers)
        except LeakshieldError:  # a resolver's own name that cannot be built: not a component
            return False

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(self._entries[n] for n in self.names())

    def resolve(self, name: str) -> tuple[Entry[T], dict[str, Any]]:
        """The entry for ``name`` (or its alias) and the parameters the alias implies."""
        if name in self._entries:
            return self._entries[name], {}
        if name in self._aliases:
            target, implied = self._aliases[name]
            return self._entries[target], implied
        for resolver in self._resolvers:
            found = resolver(name)
            if found is not None:
                return found, {}
        allowed = sorted([*self._entries, *self._aliases])
        close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UnknownNameError(f"unknown {self.kind} {name!r}{hint}; allowed: {', '.join(allowed)}")

    def get(self, name: str) -> Entry[T]:
        return self.resolve(name)[0]

    def validate(self, name: str, params: Mapping[str, Any] | None = None) -> Params:
        entry, implied = self.resolve(name)
        return entry.validate({**implied, **(params or {})})

    def create(self, name: str, params: Mapping[str, Any] | None = None, **context: Any) -> T:
        """Validate ``params`` and build the component; ``context`` passes run-time facts (shapes...)."""
        entry = self.get(name)
        validated = self.validate(name, params)
        return entry.factory(validated, **context)


def component_entry(value: Any) -> Any:
    """A component as any config writes it — a name, ``{name: …, <param>: …}`` (flat) or ``{name: …,
    params: {<param>: …}}`` (nested) — in the flat form every parser reads, so that both forms give the
    same settings everywhere; a parameter given both ways, or ``params`` that is not a mapping, is a
    ValueError naming it. Anything else is returned as it is, for the caller's own validation."""
    if isinstance(value, str):
        return {"name": value}
    if not isinstance(value, dict) or "params" not in value:
        return value
    nested = value["params"] if value["params"] is not None else {}
    if not isinstance(nested, dict):
        raise ValueError(f"params: a mapping of the component's parameters, got {type(nested).__name__}")
    twice = sorted(set(nested) & (set(value) - {"params"}))
    if twice:
        raise ValueError(f"{twice[0]!r} is given both beside 'params' and inside it: give it once")
    return {**{k: v for k, v in value.items() if k != "params"}, **nested}
