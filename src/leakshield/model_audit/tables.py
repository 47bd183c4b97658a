"""HTML pieces of the audit's report: escaped text, a table, the membership section."""

from __future__ import annotations

import html

from leakshield.membership.section import THREATS, Standing, table_rows


def escape(text: object) -> str:
    return html.escape(str(text))


def table(header: list[str], body: list[list[str]]) -> str:
    """A table of ``body``'s cells (already HTML) under ``header`` (text)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    rows = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in body)
    return f"<table><tr>{head}</tr>{rows}</table>"


def membership_html(found: dict[str, tuple[list[Standing], bool]] | None, fpr: float = 0.01) -> str:
    """The membership section: per threat, each row's strongest attack and its TPR at ``fpr`` over seeds
    (``found``: the game's ranked tables; None: left out)."""
    if found is None:
        return "<h2>Membership inference</h2><p>Left out (membership.run: false).</p>"
    parts = [
        "<h2>Membership inference</h2><p>Would the server learn who was in a client's data? Each client's "
        "records are split at random into members (trained on) and non-members; the strongest of FedMIA, "
        "the loss threshold and the gradient attacks is chosen on half the clients and measured on the "
        f"other half. TPR at {fpr * 100:g} % FPR over seeds (chance: {fpr:g}). ROC curves: "
        "<code>membership/membership.html</code>.</p>"
    ]
    for threat, (rows, control) in found.items():
        head, cells = table_rows(rows, fpr, control)
        parts.append(f"<h3>{escape(THREATS[threat][0])}</h3>")
        parts.append(table(head, [[escape(c) for c in row] for row in cells]))
    return "".join(parts)
