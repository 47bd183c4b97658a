"""The leaderboard's tables as data (a header and rows of strings), rendered to Markdown for the README
and to HTML for the report from the same cells: one ranking per threat model, and one table per realism
scenario (each defense's strongest attack at every model state and scale of that scenario)."""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from leakshield.experiment.store import CellRecord
from leakshield.leaderboard.intervals import level
from leakshield.leaderboard.ranking import AttackScore, Standing, attack_scores, standings, strongest, threats
from leakshield.leaderboard.threats import cell_threat, threat_of

#: what ends the label of a row computed by other code or settings than the installed ones
STALE_MARK = " (stale)"


@dataclass(frozen=True)
class Table:
    """A titled table: ``note`` says how to read it."""

    title: str
    header: list[str]
    rows: list[list[str]]
    note: str = ""


def _num(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def _with_interval(value: float | None, half: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.3f}" if half is None else f"{value:.3f} ± {half:.3f}"


def score_text(score: AttackScore | None) -> str:
    """``0.412 ± 0.031`` (class-level marked), with ``≈ baseline`` when not measurably above it, and then
    the highest seed's value when that seed is above the baseline (``worst seed 1.000``)."""
    if score is None:
        return "—"
    text = _with_interval(score.ssim, score.half_width) + ("" if score.metric == "ssim" else " (class)")
    if score.measurable:
        return text
    text = f"{text} ≈ {score.reference_kind}"
    worst, reference = score.worst, score.reference
    if worst is not None and reference is not None and level(worst) > level(reference):
        text += f"; worst seed {worst:.3f}"
    return text


def letters(records: Sequence[CellRecord], threat: str) -> str:
    """The catalogue letters (Carletti et al.) of the attack cells run under ``threat``."""
    found = set()
    for r in records:
        if r.kind == "attack" and r.status == "ok" and threat_of(r) == threat:
            t = cell_threat(r)
            found.add(t.catalogue if t is not None and t.catalogue else "outside A–H")
    return ", ".join(sorted(found))


def caught_text(best: AttackScore | None) -> str:
    """``40% · 0.981`` (caught share · SSIM of the missed victims), ``100% · none missed``, or ``—``
    where no guard ran."""
    if best is None or best.refused is None:
        return "—"
    if best.undetected is not None:
        missed = f"{best.undetected:.3f}"
    else:  # every victim caught, or an export without per-victim rows
        missed = "none missed" if best.refused >= 1 else "not recorded"
    return f"{best.refused:.0%} · {missed}"


def ranking_rows(rows: Sequence[Standing], *, active: bool) -> tuple[list[str], list[list[str]]]:
    """Header and rows of one threat model's ranking (``active``: add the client guards' catch rate)."""
    header = ["rank", "model · defense", "strongest attack (round)", "SSIM ↓ (95 % CI)", "PSNR",
              "accuracy (95 % CI)", "ADR", "ε", "cost", "front"]  # fmt: skip
    if active:
        header.insert(5, "caught by guard · SSIM if missed")
    body = []
    for row in rows:
        best = row.strongest
        if best is None:
            attack = "no attack cell succeeded"
        elif not row.leaks:
            attack = f"no measurable leakage (highest: {best.where})"
        else:
            attack = best.where + (f" (tied: {', '.join(row.tied)})" if row.tied else "")
        if row.failed:
            attack += f" — {len(row.failed)} failed cell(s)"
        cells = [
            str(row.rank) if row.rank is not None else "—",
            f"{row.model} · {row.defense}",
            attack,
            score_text(best),
            _num(best.psnr if best else None, ".2f"),
            _with_interval(row.accuracy, row.accuracy_half_width),
            _num(row.adr, ".3f"),
            _num(row.epsilon, ".2f"),
            "—" if row.cost is None else f"{row.cost:.2f}×",
            "●" if row.pareto else "",
        ]
        if active:
            cells.insert(5, caught_text(best))
        body.append(cells)
    return header, body


def threat_tables(records: Sequence[CellRecord], ranked: Sequence[CellRecord] = ()) -> list[Table]:
    """One ranking per threat model over ``records`` (the main grid) and ``ranked`` (the attack cells
    of scenarios that join the rankings; their utility comes from the main grid)."""
    everything = [*records, *(r for r in ranked if r.kind == "attack")]
    tables = []
    for threat in threats(everything):
        rows = [r for r in standings(everything, threat) if r.strongest is not None]
        active = threat.startswith("malicious server")
        header, body = ranking_rows(rows, active=active)
        note = ("Caught by guard: the share of victims whose client guard refused the tampered model "
                "(their reconstruction is then the no-information guess, which the SSIM column counts); "
                "SSIM if missed: the mean SSIM of the victims no guard refused — what the attack leaks "
                "when it goes undetected." if active else "")  # fmt: skip
        tables.append(Table(f"{threat[0].upper()}{threat[1:]} (catalogue {letters(everything, threat)})",
                            header, body, note))  # fmt: skip
    return tables


def realism_table(title: str, records: Sequence[CellRecord]) -> Table:
    """Each (model, defense) of a scenario × each (round, scale): its strongest attack's SSIM."""
    scores = attack_scores(records)
    columns = sorted({(s.round, s.scale) for found in scores.values() for s in found},
                     key=lambda c: (c[0], _scale_order(c[1])))  # fmt: skip
    header = ["model · defense", *(_column(r, s) for r, s in columns)]
    body = []
    for (model, defense), found in sorted(scores.items()):
        by_column: dict[tuple[int, str], list[AttackScore]] = defaultdict(list)
        for s in found:
            by_column[(s.round, s.scale)].append(s)
        cells = [f"{model} · {defense}"]
        for column in columns:
            best, _ = strongest(by_column.get(column, []))
            cells.append(score_text(best) + (f" ({best.attack})" if best is not None else ""))
        body.append(cells)
    return Table(title, header, body)


def _scale_order(scale: str) -> tuple[int, ...]:
    return tuple(int(part.split("=")[1]) for part in scale.split() if "=" in part)


def _column(round_: int, scale: str) -> str:
    return f"round {round_}" + (f" · {scale}" if scale else "")


def markdown(table: Table, level: str = "###") -> str:
    escape = lambda text: text.replace("|", "\\|")  # noqa: E731
    lines = [f"{level} {table.title}", "", "| " + " | ".join(table.header) + " |",
             "|" + "---|" * len(table.header)]  # fmt: skip
    lines += ["| " + " | ".join(escape(c) for c in row) + " |" for row in table.rows]
    return "\n".join(lines) + (f"\n\n{table.note}" if table.note else "") + "\n"


def html_table(table: Table, links: dict[str, str] | None = None, tag: str = "h3") -> str:
    """The table as HTML; ``links``: cell text → page it links to (the defense pages)."""
    links = links or {}

    def cell(text: str) -> str:
        escaped = html.escape(text)
        return f"<a href='{links[text]}'>{escaped}</a>" if text in links else escaped

    head = "".join(f"<th>{html.escape(h)}</th>" for h in table.header)
    body = "".join("<tr>" + "".join(f"<td>{cell(c)}</td>" for c in row) + "</tr>" for row in table.rows)
    note = f"<p>{html.escape(table.note)}</p>" if table.note else ""
    return f"<{tag}>{html.escape(table.title)}</{tag}><table><tr>{head}</tr>{body}</table>{note}"
