"""``leakshield list WHAT``: what is registered (datasets, models, defenses, attacks with their threat
models, the threat catalogue, aggregators, metrics, ATS's transformations)."""

from __future__ import annotations

import argparse
import difflib
import inspect
from dataclasses import dataclass
from typing import Any

from leakshield.errors import LeakshieldError
from leakshield.registry import NoParams, field_descriptions

NO_PARAMS_DOC = NoParams.__doc__

LISTABLE = (
    "datasets", "models", "defenses", "attacks", "text-attacks", "threats", "aggregators", "metrics",
    "transformations",
)  # fmt: skip


def cmd_list(args: argparse.Namespace) -> int:
    what = args.what
    if what not in LISTABLE:
        close = difflib.get_close_matches(what, LISTABLE, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise LeakshieldError(f"cannot list {what!r}{hint}; allowed: {', '.join(LISTABLE)}")
    if what == "transformations":
        from leakshield.defenses.ats import describe_library

        print("ATS's library (Gao et al., Table 1): index operation(magnitude level: value)")
        print("\n".join(describe_library()))
        return 0
    if what == "threats":
        print("\n".join(threat_catalogue()))
        return 0
    if what == "metrics":
        from leakshield.metrics import METRICS

        for spec in METRICS:
            better = "higher" if spec.higher_is_better else "lower"
            unit = f", {spec.unit}" if spec.unit else ""
            print(f"{spec.name:<15} {spec.summary} ({spec.kind}{unit}; {better} is better)")
        return 0
    registry = registry_of(what)
    width = max(len(e.name) for e in registry) + 2
    for entry in registry:
        print("\n".join(entry_lines(component_doc(entry), width, verbose=args.verbose)))
    return 0


def threat_catalogue() -> list[str]:
    """The threat catalogue with the registered attacks under each letter (``leakshield list threats``
    and the manual's threat-models page)."""
    from leakshield.attacks import ATTACKS
    from leakshield.threats import catalogue_lines

    return catalogue_lines((e.name, e.threat) for e in ATTACKS)


@dataclass(frozen=True)
class ComponentDoc:
    """What ``leakshield list -v`` and the manual's component pages say about one registered component:
    both render this one record, so they cannot disagree."""

    name: str
    summary: str
    aliases: tuple[str, ...]
    reference: str
    targets: tuple[str, ...]
    threat: str
    details: str  # the factory's docstring (datasets) or the parameter model's, as prose
    #: (field, type, default, description) of every parameter
    parameters: tuple[tuple[str, str, str, str], ...]


def component_doc(entry: Any) -> ComponentDoc:
    """The documentation record of a registry entry (:class:`leakshield.registry.Entry`)."""
    params = entry.params
    described = field_descriptions(params)
    parts = []
    if inspect.isfunction(entry.factory) and entry.factory.__doc__:  # a loader's own words (datasets)
        parts.append(inspect.cleandoc(entry.factory.__doc__))
    # the parameter model's prose, unless every parameter already carries its own description
    if params.__doc__ and params.__doc__ != NO_PARAMS_DOC and not all(described.values()):
        parts.append(inspect.cleandoc(params.__doc__))
    details = "\n".join(parts)
    rows = tuple(
        (field, _type_name(info.annotation), _default(info), described[field])
        for field, info in params.model_fields.items()
    )
    return ComponentDoc(
        entry.name,
        entry.summary,
        tuple(entry.aliases),
        entry.reference,
        tuple(entry.targets or ()),
        entry.threat.describe() if entry.threat is not None else "",
        details,
        rows,
    )


def entry_lines(doc: ComponentDoc, width: int, *, verbose: bool) -> list[str]:
    """The text form (``leakshield list``; ``verbose``: the threat, the details and every parameter)."""
    aliases = f" (aliases: {', '.join(doc.aliases)})" if doc.aliases else ""
    pad = " " * width
    lines = [f"{doc.name:<{width}}{doc.summary}{aliases}"]
    if doc.reference:
        lines.append(f"{pad}  ↳ {doc.reference}")
    if doc.targets:
        lines.append(f"{pad}  ↳ adaptive: meets {', '.join(doc.targets)} in a grid")
    if not verbose:
        return lines
    if doc.threat:
        lines.append(f"{pad}  ↳ threat: {doc.threat}")
    lines += [f"{pad}  {line}".rstrip() for line in doc.details.splitlines()]
    for field, kind, default, description in doc.parameters:
        about = f"  — {description}" if description else ""
        lines.append(f"{pad}    {field} = {default}  [{kind}]{about}")
    return lines


def markdown_section(doc: ComponentDoc, level: int = 3) -> str:
    """The manual's form of the same record: a heading, the facts, the details, a parameter table."""
    out = [f"{'#' * level} `{doc.name}`", "", doc.summary + "."]
    facts = []
    if doc.aliases:
        facts.append(f"**Aliases:** {', '.join(f'`{a}`' for a in doc.aliases)}")
    if doc.reference:
        facts.append(f"**Reference:** {doc.reference}")
    if doc.targets:
        facts.append(f"**Adaptive:** meets {', '.join(f'`{t}`' for t in doc.targets)} in a grid")
    if doc.threat:
        facts.append(f"**Threat:** {doc.threat}")
    out += ["", *(f"- {fact}" for fact in facts)] if facts else []
    if doc.details:
        out += ["", " ".join(doc.details.split())]
    if doc.parameters:
        described = any(description for *_, description in doc.parameters)
        out += ["", "| parameter | type | default |" + (" description |" if described else "")]
        out.append("|---|---|---|" + ("---|" if described else ""))
        for field, kind, default, description in doc.parameters:
            # a "|" cannot be escaped inside a table's code span: unions read "or"
            cells = [f"`{field}`", f"`{kind.replace(' | ', ' or ')}`", f"`{default.replace('|', '¦')}`"]
            cells += [description.replace("|", "\\|")] if described else []
            out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def _type_name(annotation: Any) -> str:
    name = getattr(annotation, "__name__", None)
    if name and not getattr(annotation, "__args__", None):
        return name
    return str(annotation).replace("typing.", "").replace("NoneType", "None")


def _default(info: Any) -> str:
    if info.default_factory is not None:
        return repr(info.default_factory())
    return repr(info.default)


def registry_of(what: str) -> Any:
    """The registry ``leakshield list WHAT`` lists (datasets, models, defenses, aggregators, attacks,
    text-attacks)."""
    if what == "datasets":
        from leakshield.data import DATASETS

        return DATASETS
    if what == "models":
        from leakshield.models import MODELS

        return MODELS
    if what == "defenses":
        from leakshield.defenses import DEFENSES

        return DEFENSES
    if what == "aggregators":
        from leakshield.fl import AGGREGATORS

        return AGGREGATORS
    if what == "text-attacks":
        from leakshield.text_grid.attacks import TEXT_ATTACKS

        return TEXT_ATTACKS
    from leakshield.attacks import ATTACKS

    return ATTACKS
