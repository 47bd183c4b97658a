"""The leaderboard's tables as data (a header and rows of strings), rendered to Markdown for the README
and to HTML for the report from the same cells: one ranking per threat model, and one table per realism
scenario (each defense's strongest attack at every model state and scale of that scenario)."""

from __future__ import annotations

import html
import math
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from leakshield.experiment.store import CellRecord
from leakshield.leaderboard.intervals import level
from leakshield.leaderboard.leak_rate import seeds_text
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


def marked_stale(table: Table, labels: set[str]) -> Table:
    """``table`` with every cell naming a row in ``labels`` ending in :data:`STALE_MARK`."""
    return replace(table, rows=[[c + STALE_MARK if c in labels else c for c in row] for row in table.rows])


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
    if score.reference is None:  # a class-level score: leaks at SSIM ≥ 0.6
        return f"{text} < 0.6"
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


#: the rank column's text for a row below the utility gate
DOES_NOT_TRAIN = "does not train"
#: the mark of a row whose fitted defense missed its convergence criterion at the preset's budget (in its
#: accuracy cell: the row's name stays its key for stale marks and links)
UNDER_BUDGET = "under budget"


def leak_text(score: AttackScore | None) -> str:
    """``3/8 = 0.38 [0.09, 0.76]`` (leaked victims of all, the rate, its interval), ``—`` without
    per-seed outcomes; ``(cell means)`` where an old export had no per-victim scores."""
    if score is None or not score.outcomes:
        return "—"
    return score.leak.text() + (" (cell means)" if score.from_cell_means else "")


def margin_text(score: AttackScore | None) -> str:
    """``0.214 [0.127, 0.301]``: the mean margin over seeds and its 95 % interval (inside [0, 1])."""
    margin = None if score is None else score.margin
    return "—" if margin is None else margin.text()


def victims_text(row: Standing) -> str:
    """``stage 2: 128 victims, 8 seeds`` (fresh victims per seed) or ``stage 1: 16 victims, 8 seeds``
    (the victims the attack was chosen on: biased upward by the choice)."""
    best = row.strongest
    if best is None or not best.outcomes:
        return "—"
    return f"stage {2 if row.stage_two else 1}: {best.victims} victims, {len(best.outcomes)} seeds"


def _attack_text(row: Standing) -> str:
    best = row.strongest
    if best is None:
        text = "no attack cell succeeded"
    else:
        text = best.where + (f" (tied: {', '.join(row.tied)})" if row.tied else "")
        if not row.leaks:
            text = f"no measurable leakage (highest: {text})"
    if best is not None and row.cells > 1:
        text += f" · best of {row.cells}"
    if best is not None:
        text += f" · {victims_text(row)}"
    if row.failed:
        text += f" — {len(row.failed)} failed cell(s)"
    return text


def _seeds_text(row: Standing) -> str:
    """``2 of 8 [0.03, 0.65]``: the seeds in which some stage-1 attack cell of the row leaked a victim
    (every seed, every cell: the screen for any leak), with a Clopper–Pearson interval."""
    leaking, seeds = row.seeds_leaking
    return seeds_text(leaking, seeds) if seeds else "—"


def epsilon_number(value: float) -> str:
    """ε to two decimals; ``∞`` for a DP defense without noise (σ 0)."""
    return "∞" if value == math.inf else f"{value:.2f}"


def epsilon_text(row: Standing) -> str:
    """``2.41 per record`` (DP-SGD), ``4.38 per client`` (DP-FedAvg), both when both apply, else —."""
    parts = [f"{epsilon_number(value)} per {level}" for value, level in ((row.epsilon, "record"),
                                                             (row.epsilon_client, "client"))
             if value is not None]  # fmt: skip
    return " · ".join(parts) or "—"


#: the rank column's text in a table whose strongest attack does not leak no defense (:mod:`.controls`)
ATTACK_TOO_WEAK = "unranked: the attack does not leak no defense"
#: the rank column's text for a guard above the refusal gate
REFUSES_HONEST = "refuses honest models"


def rank_text(row: Standing) -> str:
    """``3 · ab`` (place by mean margin · letters), the gate's verdict, or ``—``."""
    if row.rank is not None:
        return f"{row.rank} · {row.letters}"
    if row.control is not None and not row.control.passes:
        return ATTACK_TOO_WEAK
    if row.strongest is not None and not row.trains:
        return REFUSES_HONEST if row.accuracy is None else DOES_NOT_TRAIN
    return "—"


def versus_text(row: Standing) -> str:
    """The difference from no defense with its simultaneous interval (``reference`` for no defense)."""
    if row.defense == "none" and row.rank is not None:
        return "reference"
    return "—" if row.versus_none is None else row.versus_none.text()


def accuracy_text(row: Standing) -> str:
    """``0.967 [0.948, 0.985]``; a guard: the share of honest models it refuses."""
    if row.accuracy_interval is not None:
        text = row.accuracy_interval.text()
        return text + (f" ({UNDER_BUDGET})" if row.under_budget else "")
    if row.refuses_honest is not None:
        return f"refuses {row.refuses_honest:.0%} of honest models"
    return "—"


def ranking_rows(rows: Sequence[Standing], *, active: bool) -> tuple[list[str], list[list[str]]]:
    """Header and rows of one threat model's ranking (``active``: add the client guards' catch rate)."""
    header = ["rank · letters", "model · defense", "strongest attack (round) · victims", "margin ↓ (95 % CI)",
              "vs no defense (simultaneous CI)", "leaked victims (95 % CI)", "seeds with a leak (stage 1)",
              "SSIM (95 % CI)", "PSNR", "accuracy (95 % CI)", "ADR", "ε", "cost", "front"]  # fmt: skip
    if active:
        header.insert(9, "caught by guard · SSIM if missed")
    body = []
    for row in rows:
        best = row.strongest
        cells = [
            rank_text(row),
            f"{row.model} · {row.defense}",
            _attack_text(row),
            margin_text(best),
            versus_text(row),
            leak_text(best),
            _seeds_text(row),
            score_text(best),
            _num(best.psnr if best else None, ".2f"),
            accuracy_text(row),
            _num(row.adr, ".3f"),
            epsilon_text(row),
            "—" if row.cost is None else f"{row.cost:.2f}×",
            "●" if row.pareto else "",
        ]
        if active:
            cells.insert(9, caught_text(best))
        body.append(cells)
    return header, body


def selection_note(rows: Sequence[Standing], adapted: Callable[[str, str], str | None] | None = None) -> str:
    """How the table's strongest attacks were chosen, and how its rows are compared."""
    from leakshield.leaderboard.comparisons import ALPHA_PAIRS, ALPHA_VERSUS_NONE

    fresh = any(r.stage_two for r in rows)
    stage = ("Stage 2 reran each row's chosen cell on the same seeds with fresh victims per seed; its "
             "numbers are shown (\"stage 2\")" if fresh else "No stage 2 ran: each row shows the victims "
             "its attack was chosen on (\"stage 1\"), an estimate biased upward by the choice")  # fmt: skip
    return (f"Strongest attack: chosen among a row's K attack × round cells (\"best of K\") by leak rate "
            f"over all seeds, then mean margin. {stage}. Margin: max(SSIM − the victim's own no-information "
            "score, 0) per victim, its mean per seed, a 95 % t-interval over seeds (inside [0, 1]). Leaked "
            "victims: margin > 0 and SSIM ≥ 0.6, Clopper–Pearson at n / deff with one ρ per table. Seeds "
            "with a leak: seeds in which any stage-1 cell of the row leaked a victim. Vs no defense: the "
            "difference in mean margin, paired by seed, with a simultaneous interval (Bonferroni); * marks "
            f"a row shown to leak less (one-sided paired t, Holm at α {ALPHA_VERSUS_NONE} over the rows). "
            f"Rank: the order by mean margin; rows sharing a letter were not shown different (all pairs, "
            f"Holm at α {ALPHA_PAIRS}). \"does not train\": accuracy below chance + ½ (undefended − "
            f"chance){_floors(rows)}; \"{REFUSES_HONEST}\": a guard refusing more than half of honest "
            f"models; neither is compared nor on the front.{_budgets(rows)}{control_note(rows)}"
            f"{adaptive_note(rows, adapted)}")  # fmt: skip


def adaptive_note(rows: Sequence[Standing], adapted: Callable[[str, str], str | None] | None = None) -> str:
    """`` No measurable leakage, and the adaptive attacks each such row faced: …``: for every row without a
    leaked victim, the attacks among those it met that adapt to its defense (``adapted(attack, defense)``:
    how to name the attack, None where it does not adapt; default: a registered attack built against
    defenses, which the grid pairs with its targets only)."""
    from leakshield.attacks import ATTACKS
    from leakshield.errors import UnknownNameError

    def registered(attack: str, defense: str) -> str | None:
        try:
            return attack if ATTACKS.get(attack).targets is not None else None
        except UnknownNameError:  # a label that is no registered name: not known to be adaptive
            return None

    quiet = [r for r in rows if r.strongest is not None and not r.leaks and r.defense != "none"]
    if not quiet:
        return ""
    parts = []
    for row in quiet:
        named = ((adapted or registered)(s.attack, row.defense) for s in row.scores)
        faced = sorted({name for name in named if name is not None})
        parts.append(f"{row.defense} ({', '.join(faced) if faced else 'no adaptive attack'})")
    return " No measurable leakage, and the adaptive attacks each such row faced: " + "; ".join(parts) + "."


def control_note(rows: Sequence[Standing]) -> str:
    """`` Positive control: …`` per model: whether the strongest attack leaks no defense (else the table
    ranks nothing), or why no control ran."""
    found = {r.model: r.control for r in rows}
    if not found:
        return ""
    parts = [f"{model}: {c.text()}" if c is not None else f"{model}: not run (needs a no-defense row with "
             "an attack score on two seeds or more; the rows are ranked without it)"
             for model, c in sorted(found.items())]  # fmt: skip
    return " Positive control — " + "; ".join(parts) + "."


def _budgets(rows: Sequence[Standing]) -> str:
    """`` "under budget": …``: each fitted defense whose budget missed its convergence criterion, with the
    measured gap (the row is ranked as measured: a longer fit may change it)."""
    found = sorted({r.under_budget for r in rows if r.under_budget})
    if not found:
        return ""
    return (f" \"{UNDER_BUDGET}\": the fitted defense missed its convergence criterion at this budget "
            f"(ranked as measured; a longer fit may move it): {'; '.join(found)}.")  # fmt: skip


def _floors(rows: Sequence[Standing]) -> str:
    """`` (here 0.530 for lenet)``: the gate's floor per model, as the ranking computed it."""
    found = {r.model: r.floor for r in rows if r.floor is not None}
    return " (here " + ", ".join(f"{f:.3f} for {m}" for m, f in sorted(found.items())) + ")" if found else ""


def _coordinates(r: CellRecord) -> tuple:
    return (r.model, r.defense, r.attack, r.round, r.scale or "", r.seed, r.stage)


def ranked_records(records: Sequence[CellRecord], ranked: Sequence[CellRecord] = ()) -> list[CellRecord]:
    """The cells the rankings read: ``records`` (the main grid) and the attack cells of the scenarios
    that join the rankings (``ranked``; their utility comes from the main grid), a scenario cell that
    repeats a successful main-grid cell — same model, defense, attack, round, scale and seed — left out."""
    own = {_coordinates(r) for r in records if r.kind == "attack" and r.status == "ok"}
    kept = (r for r in ranked if (r.kind == "detection" and r.stage == 1)
            or (r.kind == "baseline" and r.stage == 2)  # stage 2's own victims' references
            or (r.kind == "attack" and _coordinates(r) not in own))  # fmt: skip
    return [*records, *kept]


#: one threat model's ranking: (threat, rows, whether the adversary tampers with the model, header, body)
Ranking = tuple[str, list[Standing], bool, list[str], list[list[str]]]


def threat_rankings(records: Sequence[CellRecord]) -> Iterator[Ranking]:
    """Per threat model of ``records``: (threat, its ranked rows with a strongest attack, whether the
    adversary tampers with the model, the table's header and body)."""
    for threat in threats(records):
        rows = [r for r in standings(records, threat) if r.strongest is not None]
        active = threat.startswith("malicious server")
        header, body = ranking_rows(rows, active=active)
        yield threat, rows, active, header, body


def threat_tables(records: Sequence[CellRecord], ranked: Sequence[CellRecord] = ()) -> list[Table]:
    """One ranking per threat model over :func:`ranked_records`."""
    everything = ranked_records(records, ranked)
    tables = []
    for threat, rows, active, header, body in threat_rankings(everything):
        guard = (" Caught by guard: the share of victims whose client guard refused the tampered model "
                "(their reconstruction is then the no-information guess, which the SSIM column counts); "
                "SSIM if missed: the mean SSIM of the victims no guard refused — what the attack leaks "
                "when it goes undetected." if active else "")  # fmt: skip
        note = selection_note(rows) + guard
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
            leaked = ""
            if best is not None and best.outcomes:
                means = ", cell means" if best.from_cell_means else ""
                leaked = f"; leaked {sum(best.leak.leaked)}/{sum(best.leak.victims)}{means}"
            cells.append(score_text(best) + (f" ({best.attack}{leaked})" if best is not None else ""))
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
