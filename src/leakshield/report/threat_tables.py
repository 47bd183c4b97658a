"""The report's threat sections: to whom each attack column leaks (the threat model stored with its
cells) and, for defense settings with a client guard, the detection cells' true- and false-positive
rates."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

from leakshield.experiment.store import CellRecord
from leakshield.threats import Threat

THREAT_HEAD = ("attack (column)", "registered name", "threat model", "catalogue (Carletti et al.)", "knows")
DETECTION_HEAD = ("model · defense", "seed", "TPR (malicious models refused)", "FPR (honest refused)",
                  "malicious / honest models judged")  # fmt: skip


def threat_rows(records: Sequence[CellRecord]) -> list[tuple[str, ...]]:
    """One row per attack column: label, registered name, who, catalogue letter, knowledge."""
    first: dict[str, CellRecord] = {}
    for r in records:
        if r.kind == "attack" and r.attack and r.threat:
            first.setdefault(r.attack, r)
    rows = []
    for label, r in sorted(first.items()):
        threat = Threat.from_json(r.threat or {})
        known = ", ".join(sorted(str(k) for k in threat.knowledge))
        rows.append((label, r.attack_name or label, threat.who, threat.catalogue_name(), known))
    return rows


def detection_rows(records: Sequence[CellRecord]) -> list[tuple[str, ...]]:
    """One row per finished detection cell."""
    rows = []
    for r in records:
        if r.kind != "detection" or r.status != "ok":
            continue
        m = r.metrics
        rows.append((f"{r.model} · {r.defense}", str(r.seed), _rate(m.get("tpr")), _rate(m.get("fpr")),
                     f"{m.get('models_malicious', 0):.0f} / {m.get('models_honest', 0):.0f}"))  # fmt: skip
    return rows


def _rate(value: object) -> str:
    if not isinstance(value, int | float) or math.isnan(value):
        return "—"
    return f"{value:.3f}"


def markdown_sections(records: Sequence[CellRecord]) -> str:
    """The two sections as markdown (empty when the run has neither)."""
    out = []
    for title, head, rows in _sections(records):
        out.append(f"\n## {title}\n\n| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n")
        out += ["| " + " | ".join(row) + " |\n" for row in rows]
    return "".join(out)


def html_sections(records: Sequence[CellRecord]) -> str:
    out, left = [], " style='text-align:left'"
    for title, head, rows in _sections(records):
        text = head is THREAT_HEAD  # words, left-aligned; the detection table's rates stay right-aligned
        header = "".join(f"<th{left if text else ''}>{html.escape(h)}</th>" for h in head)
        body = "".join("<tr>" + "".join(f"<td{left if text else ''}>{html.escape(c)}</td>" for c in row)
                       + "</tr>" for row in rows)  # fmt: skip
        out.append(f"<h2>{html.escape(title)}</h2><table><tr>{header}</tr>{body}</table>")
    return "\n".join(out)


def _sections(records: Sequence[CellRecord]) -> list[tuple[str, tuple[str, ...], list[tuple[str, ...]]]]:
    sections = []
    threats = threat_rows(records)
    if threats:
        sections.append(("Threat models: to whom each attack leaks", THREAT_HEAD, threats))
    detections = detection_rows(records)
    if detections:
        sections.append(("Client guards: detection of malicious models", DETECTION_HEAD, detections))
    return sections
