"""The leaderboard report of a run directory: ``leaderboard.html`` (ranked table by strongest attack,
the attacks' threat models, the privacy–utility frontier, the metric conventions, the run's date,
machine and version), one page per defense under ``leaderboard/`` with every attack's reconstruction
grid, ``leaderboard.md`` and ``leaderboard.json`` (the export the README's Results section is built from)."""

from __future__ import annotations

import html
import io
import re
from dataclasses import dataclass
from pathlib import Path

from leakshield.experiment.rundir import STORE_FILE, load_run_config
from leakshield.experiment.store import CellRecord, ResultStore, atomic_write_bytes
from leakshield.leaderboard.export import baseline_ssim, export_json, ranked_markdown, run_facts
from leakshield.leaderboard.ranking import Standing, standings
from leakshield.leaderboard.threats import cell_threat, threat_of
from leakshield.report.html import CLASS_SSIM_CONVENTION, CONVENTIONS, _img, restore_missing_images

STYLE = (
    "<style>body{font-family:sans-serif;max-width:1150px;margin:2em auto;color:#222}"
    "table{border-collapse:collapse;margin:1em 0}"
    "td,th{border:1px solid #bbb;padding:4px 8px;text-align:right}"
    "td:nth-child(-n+3),th:nth-child(-n+3){text-align:left}.box{background:#f4f4f4;padding:0.6em 1em}"
    "figure{display:inline-block;margin:0 1em 1em 0}figcaption{font-size:90%}img{image-rendering:pixelated}"
    "figure img{zoom:2}"
    ".front{font-weight:bold}</style>"
)


@dataclass(frozen=True)
class LeaderboardFiles:
    html: Path
    markdown: Path
    json: Path
    pages: list[Path]


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", text)


def frontier_png(rows: list[Standing], baseline: float | None) -> bytes | None:
    """Strongest-attack SSIM against accuracy per defense, the Pareto front joined, the baseline drawn."""
    points = [r for r in rows if r.strongest is not None and r.accuracy is not None]
    if not points:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5), dpi=110)
    clusters: list[list[Standing]] = []  # close points: their labels are listed, not drawn over each other
    for row in sorted(points, key=lambda r: (-r.accuracy, r.strongest.ssim)):  # type: ignore[union-attr,operator]
        x, y = row.strongest.ssim, row.accuracy  # type: ignore[union-attr]
        home = next((c for c in clusters if abs(c[0].strongest.ssim - x) < 0.06  # type: ignore[union-attr]
                     and abs(c[-1].accuracy - y) < 0.06), None)  # type: ignore[operator]  # fmt: skip
        home.append(row) if home is not None else clusters.append([row])
        ax.scatter(x, y, color="#c0392b" if row.pareto else "#34495e", s=36, zorder=3)
    for cluster in clusters:
        top = cluster[0]
        for k, row in enumerate(cluster):
            label_y = top.accuracy - 0.03 * k  # type: ignore[operator]
            point = (row.strongest.ssim, row.accuracy)  # type: ignore[union-attr]
            text = (top.strongest.ssim + 0.015, label_y)  # type: ignore[union-attr]
            ax.annotate(row.defense, point, xytext=text, fontsize=8, va="center")
    front = sorted((r for r in points if r.pareto), key=lambda r: r.strongest.ssim)  # type: ignore[union-attr]
    if len(front) > 1:
        ax.step([r.strongest.ssim for r in front], [r.accuracy for r in front], where="post",  # type: ignore[union-attr]
                color="#c0392b", lw=1.2, label="Pareto front")  # fmt: skip
    if baseline is not None:
        ax.axvline(
            baseline, color="#7f8c8d", ls="--", lw=1, label=f"no-information baseline ({baseline:.3f})"
        )
    ax.set_xlim(right=max(r.strongest.ssim for r in points) + 0.2)  # type: ignore[union-attr]  # room for the labels right of the points
    ax.set_xlabel("SSIM under the strongest attack (lower: more private)")
    ax.set_ylabel("test accuracy after FL training under the defense")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def _conventions(run_dir: Path, records: list[CellRecord]) -> str:
    config = load_run_config(run_dir)
    text = CONVENTIONS.format(
        match_on=config.metrics.match_on,
        asr=config.metrics.asr_threshold,
        accuracy=f"Accuracy: test accuracy after {config.utility.rounds} FedAvg rounds under the defense; "
        "ADR = (acc_none − acc_defense) / acc_none; cost: the defended clients' seconds per update relative "
        "to no defense, measured during that training.",
    )
    if any("class_ssim" in r.metrics for r in records):
        sizes = sorted({int(r.metrics["samples"]) for r in records if "samples" in r.metrics})
        text += CLASS_SSIM_CONVENTION.format(samples=" / ".join(map(str, sizes)))
    note = next((r.metrics.get("lpips_note") for r in records if r.metrics.get("lpips_note")), None)
    text += f" LPIPS: {note}" if note else " LPIPS: AlexNet backbone (metrics.lpips)."
    return text


def _ranked_html(rows: list[Standing]) -> str:
    head = ("<table><tr><th>rank</th><th>model · defense</th><th>strongest attack (round; threat model)</th>"
            "<th>SSIM</th><th>PSNR</th><th>accuracy</th><th>ADR</th><th>ε</th><th>cost</th>"
            "<th>front</th></tr>")  # fmt: skip
    body = []
    for row in rows:
        best, page = row.strongest, f"leaderboard/{slug(row.model + '__' + row.defense)}.html"
        attack = (
            "no attack cell succeeded" if best is None else f"{best.attack} (r{best.round}; {best.threat})"
        )
        if row.tied:
            attack += f" — tied: {', '.join(row.tied)}"
        if row.failed:
            attack += f" — {len(row.failed)} failed cell(s)"
        cells = [
            str(row.rank or "—"),
            f"<a href='{page}'>{html.escape(row.model)} · {html.escape(row.defense)}</a>",
            html.escape(attack),
            "—" if best is None else f"{best.ssim:.3f}" + ("" if best.metric == "ssim" else " (class)"),
            "—" if best is None or best.psnr is None else f"{best.psnr:.2f}",
            "—" if row.accuracy is None else f"{row.accuracy:.3f}",
            "—" if row.adr is None else f"{row.adr:.3f}",
            "—" if row.epsilon is None else f"{row.epsilon:.2f}",
            "—" if row.cost is None else f"{row.cost:.2f}×",
            "●" if row.pareto else "",
        ]
        cls = " class='front'" if row.pareto else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return head + "".join(body) + "</table>"


def _attack_table(records: list[CellRecord]) -> str:
    first = {}
    for r in records:
        if r.kind == "attack" and r.attack:
            first.setdefault(r.attack, r)
    rows = "".join(
        f"<tr><td>{html.escape(a)}</td><td>{html.escape(r.attack_name or a)}</td><td>{threat_of(r)}</td>"
        f"<td>{html.escape(_catalogue(r))}</td></tr>"
        for a, r in sorted(first.items())
    )
    return ("<table><tr><th>attack (column)</th><th>registered name</th><th>threat model</th>"
            f"<th>catalogue (Carletti et al.)</th></tr>{rows}</table>")  # fmt: skip


def _catalogue(record: CellRecord) -> str:
    threat = cell_threat(record)
    return "—" if threat is None else threat.catalogue_name()


def _defense_page(run_dir: Path, row: Standing, records: list[CellRecord], name: str) -> str:
    mine = [r for r in records if r.kind == "attack" and r.model == row.model and r.defense == row.defense]
    title = html.escape(row.defense)
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>{STYLE}"
             f"</head><body><p><a href='../leaderboard.html'>← {html.escape(name)}</a></p>"
             f"<h1>{html.escape(row.model)} · {html.escape(row.defense)}</h1>"]  # fmt: skip
    parts.append(
        "<table><tr><th>attack</th><th>round</th><th>threat model</th><th>SSIM</th><th>PSNR</th></tr>"
    )
    for s in sorted(row.scores, key=lambda s: (-s.ssim, s.attack, s.round)):
        psnr = "—" if s.psnr is None else f"{s.psnr:.2f}"
        parts.append(f"<tr><td>{html.escape(s.attack)}</td><td>{s.round}</td><td>{s.threat}</td>"
                     f"<td>{s.ssim:.3f}{'' if s.metric == 'ssim' else ' (class)'}</td>"
                     f"<td>{psnr}</td></tr>")  # fmt: skip
    parts.append("</table><h2>Reconstructions</h2><p>Rows: true images, defended inputs (when the defense "
                 "changed them), reconstructions matched to the truth; GAN attack: private images and the "
                 "attacker's samples per class.</p>")  # fmt: skip
    for r in sorted(mine, key=lambda r: (r.attack or "", r.round or 0, r.seed or 0)):
        caption = f"{r.attack} · round {r.round} · seed {r.seed}"
        if r.status != "ok":
            parts.append(f"<p>{html.escape(caption)}: failed — {html.escape(r.error or '')}</p>")
        elif r.images and (run_dir / r.images).is_file():
            parts.append(f"<figure>{_img((run_dir / r.images).read_bytes(), caption)}"
                         f"<figcaption>{html.escape(caption)}</figcaption></figure>")  # fmt: skip
    return "\n".join([*parts, "</body></html>"])


def build_leaderboard(run_dir: str | Path, preset: str = "custom") -> LeaderboardFiles:
    """Write the leaderboard files into ``run_dir`` from its stored cells."""
    run_dir = Path(run_dir)
    config = load_run_config(run_dir)
    store = ResultStore(run_dir / STORE_FILE)
    store.check(config.fingerprint())
    records = store.records()
    restore_missing_images(run_dir, records)
    rows = standings(records)
    baseline = baseline_ssim(records)
    facts = run_facts(records, config.name, preset, config.fingerprint())
    markdown = ranked_markdown(rows, baseline)
    plot = frontier_png(rows, baseline)
    pages = []
    for row in rows:
        path = run_dir / "leaderboard" / f"{slug(row.model + '__' + row.defense)}.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, _defense_page(run_dir, row, records, config.name).encode())
        pages.append(path)
    failed = [r for r in records if r.status != "ok"]
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>leakshield leaderboard: "
        f"{html.escape(config.name)}</title>{STYLE}</head><body>",
        f"<h1>leakshield leaderboard: {html.escape(config.name)}</h1>",
        f"<p class='box'>Run finished {facts['finished']} · leakshield {facts['leakshield']} · torch "
        f"{facts['torch']} · {html.escape(facts['machine'])} · {facts['cells']} cells "
        f"({len(failed)} failed), "
        f"{facts['cell_seconds']:.0f} s of cell time · config fingerprint {facts['fingerprint']}</p>",
        "<h2>Ranking: privacy under the strongest attack</h2>",
        _ranked_html(rows),
        f"<p>{html.escape(markdown.rsplit(chr(10), 2)[-2])}</p>",
        "<h2>Privacy–utility frontier</h2>",
        _img(plot, "privacy-utility frontier")
        if plot
        else "<p>No defense has both an attack score and an accuracy.</p>",
        "<h2>Attacks and their threat models</h2>",
        _attack_table(records),
        f"<h2>Metric conventions</h2><p class='box'>{html.escape(_conventions(run_dir, records))}</p>",
        "<p>Full per-cell table: <a href='report.html'>report.html</a>, "
        "<a href='results.csv'>results.csv</a>.</p>",
        "</body></html>",
    ]
    files = LeaderboardFiles(
        run_dir / "leaderboard.html", run_dir / "leaderboard.md", run_dir / "leaderboard.json", pages
    )
    atomic_write_bytes(files.html, "\n".join(parts).encode())
    atomic_write_bytes(files.markdown, f"# {config.name}\n\n{markdown}".encode())
    atomic_write_bytes(files.json, export_json(records, facts).encode())
    return files
