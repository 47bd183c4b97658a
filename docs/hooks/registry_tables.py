"""mkdocs hooks. A page's ``<!-- registry: KIND -->`` line becomes one section per registered component
of that kind (attacks, text-attacks, defenses, models, datasets, aggregators; ``threats``: the catalogue), rendered from
the same record as ``leakshield list KIND -v`` (:func:`leakshield.cli_list.component_doc`), so the manual
and the command line say the same thing."""

from __future__ import annotations

import re

MARKER = re.compile(r"^<!-- registry: ([\w-]+) -->$", re.MULTILINE)
KINDS = ("attacks", "text-attacks", "defenses", "models", "datasets", "aggregators")


def on_page_markdown(markdown: str, **_: object) -> str:
    from leakshield.cli_list import component_doc, markdown_section, registry_of, threat_catalogue

    def render(match: re.Match[str]) -> str:
        kind = match.group(1)
        if kind == "threats":  # the catalogue as `leakshield list threats` prints it
            return "```text\n" + "\n".join(threat_catalogue()) + "\n```"
        if kind not in KINDS:
            allowed = ", ".join(("threats", *KINDS))
            raise ValueError(f"registry marker {match.group(0)!r}: the kind is one of {allowed}")
        return "\n".join(markdown_section(component_doc(e)) for e in registry_of(kind))

    return MARKER.sub(render, markdown)


SPHINX_ROLE = re.compile(r":(?:class|meth|func|attr|mod|data|obj):(<code>)")


def on_page_content(html: str, **_: object) -> str:
    """Docstrings cite code with Sphinx roles (``:class:`X```), which the API pages would print
    literally: keep the code, drop the role."""
    return SPHINX_ROLE.sub(r"\1", html)
