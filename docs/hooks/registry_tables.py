"""mkdocs hooks. A page's ``<!-- registry: KIND -->`` line becomes one section per registered component of
that kind (attacks, defenses, models, datasets, aggregators; ``threats``: the catalogue), rendered from the same record as
``leakshield list KIND -v`` (:func:`leakshield.cli_list.component_doc`), so the manual and the command
line say the same thing."""

from __future__ import annotations

import re

MARKER = re.compile(r"^<!-- registry: (\w+)(?: only=([\w,-]+))? -->$", re.MULTILINE)


def on_page_markdown(markdown: str, **_: object) -> str:
    from leakshield.cli_list import registry_of, component_doc, markdown_section

    def render(match: re.Match[str]) -> str:
        kind, only = match.group(1), match.group(2)
        if kind == "threats":  # the catalogue as `leakshield list threats` prints it
            from leakshield.attacks import ATTACKS
            from leakshield.threats import catalogue_lines

            lines = catalogue_lines((e.name, e.threat) for e in ATTACKS)
            return "```text\n" + "\n".join(lines) + "\n```"
        wanted = set(only.split(",")) if only else None
        entries = [e for e in registry_of(kind) if wanted is None or e.name in wanted]
        if not entries:
            raise ValueError(f"registry marker {match.group(0)!r}: nothing registered matches")
        return "\n".join(markdown_section(component_doc(e)) for e in entries)

    return MARKER.sub(render, markdown)


SPHINX_ROLE = re.compile(r":(?:class|meth|func|attr|mod|data|obj):(<code>)")


def on_page_content(html: str, **_: object) -> str:
    """Docstrings cite code with Sphinx roles (``:class:`X```), which the API pages would print
    literally: keep the code, drop the role."""
    return SPHINX_ROLE.sub(r"\1", html)
