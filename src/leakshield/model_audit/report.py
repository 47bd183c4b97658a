"""The audit's report: per threat model the worst measured leakage of the federation as it runs (its
strongest attack on fresh victims per seed, with intervals over seeds, and the worst attack after each
attacked round), what each candidate defense buys at the strength that fits the accuracy budget (ranked
by the leaderboard's rule), the DP settings check, the reconstructions beside the originals, the
attacks left out and why, and the commands that reproduce every number. HTML, and PDF through headless
Chromium's print-to-PDF."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from leakshield import __version__
from leakshield.dpaudit.checker import check_experiment
from leakshield.dpaudit.findings import Finding
from leakshield.experiment.config import DefenseSetting
from leakshield.experiment.store import CellRecord, atomic_write_bytes
from leakshield.leaderboard.budgets import BudgetChoice, accuracy_costs, within_budget
from leakshield.leaderboard.ranking import AttackScore, Standing, standings, strongest, threats
from leakshield.leaderboard.stage_two import FOLDER
from leakshield.leaderboard.tables import leak_text
from leakshield.membership.section import Standing as MembershipStanding
from leakshield.model_audit.config import AuditConfig
from leakshield.model_audit.facts import ModelFacts
from leakshield.model_audit.pdf import html_to_pdf
from leakshield.model_audit.plan import YOURS, PlannedAttack
from leakshield.model_audit.run import CONFIG_FILE, GRID, stage_dir
from leakshield.model_audit.tables import budget_table, membership_html, rows_table, score_text
from leakshield.model_audit.tables import escape as _e
from leakshield.model_audit.tables import table as _table

STYLE = (
    "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222;line-height:1.4}"
    "table{border-collapse:collapse;margin:0.6em 0 1.2em}td,th{border:1px solid #bbb;padding:4px 8px;"
    "text-align:right;vertical-align:top}td:first-child,th:first-child{text-align:left}"
    ".box{background:#f4f4f4;padding:0.6em 1em}.leak{color:#a00;font-weight:bold}"
    "figure{margin:0 0 1em}figcaption{font-size:90%}img{image-rendering:pixelated;max-width:100%}"
    "code{background:#f0f0f0;padding:0 3px}h2{border-bottom:1px solid #ccc;margin-top:1.6em}"
    "h2,h3{page-break-after:avoid}table,figure,li{page-break-inside:avoid}</style>"
)
#: where the reconstruction grid's rows are explained
GRID_CAPTION = (
    "top row: the victims' images; bottom row: the attack's reconstructions (a middle row, when "
    "present: the images as the defense changed them)"
)


@dataclass(frozen=True)
class ThreatFinding:
    """One threat model's answer: the federation's own row (``yours``, or no defense when it runs
    none), the worst attack after each attacked round, every row, the budget's ranking and the strongest
    cell's image (PNG of its first seed)."""

    threat: str
    own: Standing
    by_round: list[tuple[int, AttackScore]]
    rows: list[Standing]
    budget: BudgetChoice
    image: bytes | None = None

    @property
    def leaks(self) -> bool:
        """Whether the strongest attack leaked a victim measurably (on the fresh victims where stage 2
        ran; the GAN attack of a client has no stage 2)."""
        return self.own.strongest is not None and self.own.strongest.measurable

    @property
    def leaked_in_selection(self) -> bool:
        """Whether some stage-1 cell leaked a victim (the cells that chose the attack)."""
        return any(s.measurable for s in self.own.scores)


@dataclass
class AuditReport:
    """The audit's findings (:func:`build_report`); ``to_html`` and ``to_pdf`` render them."""

    config: AuditConfig
    facts: ModelFacts
    attacks: list[PlannedAttack]
    findings: list[ThreatFinding]
    dp: list[Finding]
    out: Path
    cells: int
    #: defense → its accuracy cost below no defense in words (mean, one-sided bound, seeds)
    costs: dict[str, str] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    #: what the run computed: ``{computed, stored, failed, reruns}`` of the grid and stage 2, and the
    #: membership runs ``membership_computed`` and ``membership_stored`` (empty for a report rebuilt alone)
    counts: dict[str, int] = field(default_factory=dict)
    #: the files :meth:`write` wrote
    files: list[Path] = field(default_factory=list)
    #: the membership game's ranked tables per threat (None: left out)
    membership: dict[str, tuple[list[MembershipStanding], bool]] | None = None
    #: (label, reason) of each candidate defense that cannot work on the model
    left_out: list[tuple[str, str]] = field(default_factory=list)

    def finding(self, threat: str) -> ThreatFinding | None:
        """The finding of the threat model whose words start with ``threat`` (None: not audited)."""
        return next((f for f in self.findings if f.threat.startswith(threat)), None)

    def to_html(self) -> str:
        return render_html(self)

    def write(self, pdf: bool = False) -> list[Path]:
        """Write ``audit.html`` (and ``audit.pdf``) into the run folder; the paths written."""
        page = self.out / "audit.html"
        atomic_write_bytes(page, self.to_html().encode())
        written = [page]
        if pdf:
            written.append(self.to_pdf(self.out / "audit.pdf"))
        return written

    def to_pdf(self, path: str | Path) -> Path:
        """Print the HTML report to ``path`` with headless Chromium (one line when it is not installed)."""
        return html_to_pdf(self.to_html(), Path(path))


def own_row(rows: list[Standing]) -> Standing | None:
    """The federation's own row: ``yours``, else no defense."""
    return next((r for r in rows if r.defense == YOURS), None) or next(
        (r for r in rows if r.defense == "none"), None
    )


def worst_by_round(row: Standing) -> list[tuple[int, AttackScore]]:
    """Per attacked round, the strongest of ``row``'s stage-1 cells by the leaderboard's rule (leak rate
    over all seeds, then mean margin, then name: :func:`~leakshield.leaderboard.ranking.strongest`)."""
    rounds = sorted({s.round for s in row.scores})
    found = [(r, strongest([s for s in row.scores if s.round == r])[0]) for r in rounds]
    return [(r, s) for r, s in found if s is not None]


def strongest_image(records: list[CellRecord], row: Standing) -> bytes | None:
    """The image grid of ``row``'s strongest cell in its first seed (stage 2's when it ran)."""
    best = row.strongest
    if best is None:
        return None
    stage = 2 if row.stage_two else 1
    cells = [
        r
        for r in records
        if r.kind == "attack"
        and r.status == "ok"
        and r.defense == row.defense
        and r.attack == best.attack
        and int(r.round or 0) == best.round
        and r.stage == stage
        and r.image_png
    ]
    return min(cells, key=lambda r: int(r.seed or 0)).image_png if cells else None


def build_report(
    config: AuditConfig,
    facts: ModelFacts,
    attacks: list[PlannedAttack],
    records: list[CellRecord],
    out: Path,
    membership: dict[str, tuple[list[MembershipStanding], bool]] | None = None,
    left_out: list[tuple[str, str]] | None = None,
) -> AuditReport:
    """The report of an audit's stored cells (grid and stage 2)."""
    costs = accuracy_costs(records)
    findings = []
    for threat in threats(records):
        # the rows this adversary attacked (the GAN attack meets no defense and yours only)
        rows = [r for r in standings(records, threat) if r.scores or r.strongest or r.failed]
        own = own_row(rows)
        if own is None:
            continue
        budget = within_budget(rows, costs, config.budget_points)
        findings.append(
            ThreatFinding(threat, own, worst_by_round(own), rows, budget, strongest_image(records, own))
        )
    stack = config.own_stack()
    yours = [DefenseSetting.model_validate({"label": YOURS, "stack": stack})] if stack else []
    dp = check_experiment(SimpleNamespace(defenses=yours))
    failed = sorted(
        {
            f"{r.kind} {r.defense or ''} {r.attack or ''}@{r.round}: {r.error}"
            for r in records
            if r.status != "ok"
        }
    )
    words = {defense: cost.text() for (_, defense), cost in costs.items()}
    return AuditReport(
        config,
        facts,
        attacks,
        findings,
        dp,
        out,
        len(records),
        words,
        failed,
        membership=membership,
        left_out=list(left_out or []),
    )


#: metric → how a sentence names it
METRIC_WORDS = {"ssim": "SSIM", "class_ssim": "class-level SSIM (a class's template, not one image)"}


def _sentence(f: ThreatFinding) -> str:
    best = f.own.strongest
    who = "your federation" if f.own.defense == YOURS else "your federation (no defense)"
    if best is None:
        return f"{f.threat}: no attack cell succeeded against {who}; see the failed cells."
    reference = (
        f" against a no-information level of {best.reference:.3f}" if best.reference is not None else ""
    )
    if f.leaks:
        verdict = "leaks"
    elif f.leaked_in_selection and f.own.stage_two:
        verdict = "leaked only in the cells that chose the attack, not measurably on fresh victims"
    else:
        verdict = "shows no measurable leakage"
    words = METRIC_WORDS.get(best.metric, best.metric)
    unit = "victims (SSIM ≥ 0.6 and above the guess)" if best.metric == "ssim" else "victims"
    victims = f"; leaked {unit}: {leak_text(best)}" if best.outcomes else ""
    stage = "on fresh victims" if f.own.stage_two else "on the victims that chose it (no stage 2)"
    return (
        f"{f.threat}: {who} {verdict} — the strongest attack, {best.where}, reaches {words} "
        f"{score_text(best)}{reference} {stage}{victims}."
    )


def measured_text(config: AuditConfig) -> str:
    """What one attacked update is, in words (the audit measures that, not a client's whole round)."""
    fl = config.federation
    if fl.secure_aggregation:
        return (
            f"Under secure aggregation the server sees each round's sum over {fl.aggregate_size} "
            f"clients, each on a batch of {fl.local.batch_size} image(s); its attacks read that sum."
        )
    local = config.federation.local
    steps = (
        "one gradient of it (FedSGD)"
        if local.algorithm == "fedsgd"
        else f"{local.local_epochs} local step(s) of {local.optimizer.upper()} on it (FedAvg, one step "
        "per epoch)"
    )
    return (
        f"Each attacked update is a victim's batch of {local.batch_size} image(s) and {steps}; a client "
        "whose round covers more data or more steps blends more images into one update (the realism "
        "scenarios of the leaderboard measure how that changes leakage)."
    )


def shown_width(png: bytes, most: int = 1000) -> int:
    """The width a reconstruction grid is shown at: twice its own, at most ``most`` pixels."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        return min(2 * image.width, most)


def render_html(report: AuditReport) -> str:
    """The report as one self-contained HTML page."""
    config, facts = report.config, report.facts
    costs = report.costs
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>leakshield audit: {_e(config.name)}"
        f"</title>{STYLE}</head><body><h1>Privacy audit: {_e(config.name)}</h1>",
        "<div class='box'>"
        + "<br>".join(_e(line) for line in facts.lines())
        + f"<br>leakshield {_e(__version__)} · {report.cells} stored cells · run folder "
        + f"{_e(report.out)}</div>",
        "<h2>Summary</h2><ul>",
    ]
    for f in report.findings:
        cls = " class='leak'" if f.leaks else ""
        parts.append(f"<li{cls}>{_e(_sentence(f))}</li>")
    parts.append(
        f"</ul><p>{_e(measured_text(config))} Margins are each victim's SSIM above what the attacker "
        "could guess without the update "
        "(the public mean image, or a prior's draw); intervals are 95 % over the seeds, the unit of "
        "repetition. '*' marks a defense shown to leak less than no defense (one-sided paired test, "
        "Holm-corrected); rows sharing a letter were not shown different.</p>"
    )
    for f in report.findings:
        parts.append(f"<section><h2>{_e(f.threat)}</h2>")
        rounds = [[str(r), _e(s.where), _e(score_text(s)), _e(leak_text(s))] for r, s in f.by_round]
        parts.append(f"<h3>Worst leakage of {_e(f.own.defense)} by attacked round</h3>")
        fresh = " (the summary's numbers are fresh victims')" if f.own.stage_two else ""
        parts.append(
            "<p>The strongest attack after each round, on the victims that chose it (stage 1: the choice "
            f"of the best of several attacks biases these upward){fresh}.</p>"
        )
        parts.append(_table(["after round", "strongest attack", "score (95 %)", "leaked victims"], rounds))
        if f.image:
            parts.append(
                f"<figure><img alt='reconstructions' style='width:{shown_width(f.image)}px' "
                "src='data:image/png;base64,"
                f"{base64.b64encode(f.image).decode()}'><figcaption>{_e(f.own.defense)}, "
                f"{_e(f.own.strongest.where if f.own.strongest else '')}, first seed: "
                f"{_e(GRID_CAPTION)}</figcaption></figure>"
            )
        parts.append(f"<h3>Within your budget ({config.budget_points:g} accuracy points)</h3>")
        parts.append(budget_table(f.budget, config.budget_points, costs))
        parts.append("<h3>Every row</h3>" + rows_table(f.rows) + "</section>")
    parts.append(membership_html(report.membership))
    parts.append("<h2>DP settings check</h2>")
    parts.append(
        "<ul>" + "".join(f"<li>{_e(d.line())}</li>" for d in report.dp) + "</ul>"
        if report.dp
        else "<p>No finding: "
        + ("your defenses claim no DP." if config.defenses else "you run no defense.")
        + " The empirical canary audit (<code>leakshield dp-audit</code>) audits leakshield's "
        "cross-device federation; it is not run on your model here.</p>"
    )
    parts.append("<h2>Attacks and defenses planned and left out</h2><ul>")
    parts += [
        f"<li>{_e(a.threat)}: <b>{_e(a.name)}</b> — "
        + ("run" if a.planned else f"left out: {_e(a.reason)}")
        + "</li>"
        for a in report.attacks
    ]
    parts += [
        f"<li>candidate defense <b>{_e(label)}</b> — left out: {_e(why)}</li>"
        for label, why in report.left_out
    ]
    parts.append("</ul>")
    if report.failed:
        parts.append(
            "<h2>Failed cells</h2><ul>" + "".join(f"<li>{_e(x)}</li>" for x in report.failed) + "</ul>"
        )
    parts.append(reproduce_html(report))
    return "\n".join(parts)


def reproduce_html(report: AuditReport) -> str:
    """The commands that recompute every number of the report."""
    out, grid = report.out, report.out / GRID
    second = stage_dir(out, report.config) / FOLDER
    rerun = (
        f"<code>leakshield audit {_e(out / CONFIG_FILE)} --out {_e(out)}</code>, from the folder your "
        "model's module is imported from (it computes only what is missing, then rewrites this page)"
    )
    if report.config.model.name.startswith("local:"):
        rerun = (
            "rerun the same Python call (the model was defined in __main__ or inside a function, which "
            "the command line cannot import: put it in a module to rerun it with <code>leakshield "
            "audit</code>)"
        )
    return (
        f"<h2>Reproduce</h2><p>Every number above: {rerun}. Per-cell table and figures: <code>leakshield "
        f"report {_e(grid)}</code>. One stage-2 rerun: <code>leakshield run {_e(second)}/&lt;name&gt;"
        f"/config.yaml --out {_e(second)}/&lt;name&gt;</code>.</p></body></html>"
    )
