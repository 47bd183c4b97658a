"""The report's threat sections: to whom each attack column leaks (the threat model stored with its
cells) and, for defense settings with a client guard, the detection cells' true- and false-positive
rates, overall and per attack next to what the attack leaks with and without the guard."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

from leakshield.experiment.store import CellRecord
from leakshield.threats import Threat

THREAT_HEAD = ("attack (column)", "registered name", "threat model", "catalogue (Carletti et al.)", "knows")
DETECTION_HEAD = ("model · defense", "seed", "TPR (malicious models refused)", "FPR (honest refused)",
                  "malicious / honest models judged")  # fmt: skip
PER_ATTACK_HEAD = ("model · defense", "attack", "TPR (mean over seeds)", "models judged",
                   "ASR without a guard", "ASR with it", "victims refused",
                   "ASR of the victims it let through")  # fmt: skip
WORD_COLUMNS = {"model · defense", "attack"}


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


def per_attack_rows(records: Sequence[CellRecord]) -> list[tuple[str, ...]]:
    """Per guard setting and model-modifying attack: its mean true-positive rate over the detection
    cells, and the attack cells' ASR without a guard (defense ``none``), with the guard, the share of
    victims refused and the ASR of the victims let through (a refused victim scores the no-information
    guess, below any ASR threshold, so that is ASR / (1 − refused))."""
    judged: dict[tuple[str, str, str], list[tuple[float, int]]] = {}
    for r in records:
        if r.kind == "detection" and r.status == "ok":
            for row in r.victims:
                if "tpr" in row and isinstance(row["tpr"], int | float):
                    judged.setdefault((r.model, r.defense, row["attack"]), []).append(
                        (row["tpr"], row["models"])
                    )
    leaks: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    for r in records:
        if r.kind == "attack" and r.status == "ok" and isinstance(r.metrics.get("asr"), int | float):
            refused = r.metrics.get("refused", 0.0)
            refused = refused if isinstance(refused, int | float) and not isinstance(refused, bool) else 0.0
            leaks.setdefault((r.model, r.defense, r.attack), []).append((r.metrics["asr"], refused))
    rows = []
    for (model, defense, attack), rates in sorted(judged.items()):
        tpr = sum(t for t, _ in rates) / len(rates)
        guarded, plain = leaks.get((model, defense, attack), []), leaks.get((model, "none", attack), [])
        asr = sum(a for a, _ in guarded) / len(guarded) if guarded else math.nan
        refused = sum(f for _, f in guarded) / len(guarded) if guarded else math.nan
        through = asr / (1 - refused) if guarded and refused < 1 else math.nan
        unguarded = sum(a for a, _ in plain) / len(plain) if plain else math.nan
        count = str(sum(n for _, n in rates))
        rows.append((f"{model} · {defense}", attack, _rate(tpr), count, _rate(unguarded), _rate(asr),
                     _rate(refused), _rate(through)))  # fmt: skip
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
        # words left-aligned (the threat table, the names of the detection tables); rates right-aligned
        align = [left if head is THREAT_HEAD or h in WORD_COLUMNS else "" for h in head]
        header = "".join(f"<th{a}>{html.escape(h)}</th>" for a, h in zip(align, head, strict=True))
        cells = (zip(align, row, strict=True) for row in rows)
        body = "".join("<tr>" + "".join(f"<td{a}>{html.escape(c)}</td>" for a, c in r) + "</tr>"
                       for r in cells)  # fmt: skip
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
        sections.append(("Client guards against each attack: detection and leakage", PER_ATTACK_HEAD,
                         per_attack_rows(records)))  # fmt: skip
    return sections
