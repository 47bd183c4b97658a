"""The leaderboard report of a run directory: ``leaderboard.html`` (ranked table by strongest attack,
the attacks' threat models, the privacy–utility frontier, the metric conventions, the run's date,
machine and version), one page per defense under ``leaderboard/`` with every attack's reconstruction
grid, ``leaderboard.md`` and ``leaderboard.json`` (the export the README's Results section is built from)."""

from __future__ import annotations

import html
import io
import json
import re
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leakshield.errors import LeakshieldError
from leakshield.experiment.rundir import STORE_FILE, load_run_config
from leakshield.experiment.store import CellRecord, ResultStore, atomic_write_bytes
from leakshield.leaderboard.budgets import family
from leakshield.leaderboard.export import (
    STAGE_TWO_PREFIX,
    Scenario,
    baseline_ssim,
    export_json,
    reading_note,
    results_markdown,
    results_tables,
    run_facts,
    source_line,
)
from leakshield.leaderboard.labels import place_labels
from leakshield.leaderboard.ranking import Standing, standings
from leakshield.leaderboard.stage_two import FOLDER, as_scenarios, load_stage_two
from leakshield.leaderboard.staleness import provenance_table
from leakshield.leaderboard.tables import html_table, leak_text, markdown, ranked_records
from leakshield.leaderboard.text_section import text_tables
from leakshield.leaderboard.threats import cell_threat, threat_of
from leakshield.report.html import (
    CLASS_SSIM_CONVENTION,
    CONVENTIONS,
    _img,
    guess_text,
    restore_missing_images,
)

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


#: how close (privacy, accuracy) two points may be before their labels are listed together in one block
#: (points this close are one spot on the plot; :func:`.labels.place_labels` keeps the blocks apart)
LABEL_ROOM = (0.03, 0.02)


def privacy_x(row: Standing) -> float:
    """A row's x on the frontier: its strongest attack's mean margin over the no-information score (stage
    2's victims where they ran; its SSIM where the scores carry no per-seed outcomes)."""
    best = row.strongest
    assert best is not None
    margin = best.margin
    return margin.mean if margin is not None else best.ssim


def label_clusters(points: list[Standing]) -> list[list[Standing]]:
    """Points grouped for labelling, highest accuracy first: a point within :data:`LABEL_ROOM` of a
    group's first point (x) and last point (accuracy) joins it; a group's labels are listed right of
    its first point instead of drawn over each other."""
    clusters: list[list[Standing]] = []
    for row in sorted(points, key=lambda r: (-r.accuracy, privacy_x(r))):  # type: ignore[operator]
        x, y = privacy_x(row), row.accuracy
        home = next((c for c in clusters if abs(privacy_x(c[0]) - x) < LABEL_ROOM[0]
                     and abs(c[-1].accuracy - y) < LABEL_ROOM[1]), None)  # type: ignore[operator]  # fmt: skip
        home.append(row) if home is not None else clusters.append([row])
    return clusters


def label_groups(points: list[Standing]) -> list[tuple[tuple[float, float], str]]:
    """One block of names per :func:`label_clusters` group, anchored at its first point (what
    :func:`.labels.place_labels` places)."""
    return [((privacy_x(c[0]), c[0].accuracy),  # type: ignore[misc]
             "\n".join(r.defense + ("" if r.trains else " (does not train)") for r in c))
            for c in label_clusters(points)]  # fmt: skip


#: the colours of the defenses' curves over their rungs, in turn
CURVE_COLORS = ["#2980b9", "#27ae60", "#8e44ad", "#d35400", "#16a085", "#7f8c8d", "#2c3e50"]


def _curves(ax: Any, points: list[Standing]) -> None:
    """Each defense run at several strengths (:mod:`.strengths`) as its curve over its rungs, in order of
    accuracy, every rung with its 95 % intervals (mean margin across, accuracy up)."""
    groups: dict[tuple[str, str], list[Standing]] = defaultdict(list)
    for row in points:
        groups[(row.model, family(row.defense))].append(row)
    colors = iter(CURVE_COLORS * 8)
    for (_, name), rungs in sorted(groups.items()):
        if len(rungs) < 2:
            continue
        rungs = sorted(rungs, key=lambda r: -r.accuracy)  # type: ignore[operator]
        color = next(colors)
        xs, ys = [privacy_x(r) for r in rungs], [r.accuracy for r in rungs]
        ax.plot(xs, ys, color=color, lw=1.1, alpha=0.8, zorder=2, label=f"{name} over its rungs")
        for row, x, y in zip(rungs, xs, ys, strict=True):
            margin, accuracy = row.strongest.margin, row.accuracy_interval  # type: ignore[union-attr]
            across = [[x - margin.low], [margin.high - x]] if margin is not None else None
            up = [[y - accuracy.low], [accuracy.high - y]] if accuracy is not None else None  # type: ignore[operator]
            ax.errorbar(x, y, xerr=across, yerr=up, fmt="none", ecolor=color, elinewidth=0.8, alpha=0.6,
                        capsize=2, zorder=2)  # fmt: skip


def frontier_png(rows: list[Standing], baseline: float | None) -> bytes | None:
    """Leaked share under the strongest attack against accuracy per defense (triangles: rows that leak
    measurably; hollow: rows that do not train), the Pareto front joined; ``baseline`` drawn where x is
    SSIM (scores without outcomes)."""
    points = [r for r in rows if r.strongest is not None and r.accuracy is not None]
    if not points:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_ssim = not any(r.strongest.outcomes for r in points)  # type: ignore[union-attr]
    fig, ax = plt.subplots(figsize=(7.5, 5), dpi=110)
    for row in points:  # a triangle: a leak somewhere (some cell, some seed), whatever the margin shown
        color = "#c0392b" if row.pareto else "#34495e"
        ax.scatter(privacy_x(row), row.accuracy, s=36, zorder=3, color=color if row.trains else "none",
                   edgecolors=color, marker="^" if row.leaks and not by_ssim else "o")  # fmt: skip
    if not by_ssim:
        ax.scatter([], [], marker="o", color="#34495e", label="no measurable leakage")
        ax.scatter([], [], marker="^", color="#34495e", label="a victim leaked in some cell and seed")
    _curves(ax, points)
    front = sorted((r for r in points if r.pareto), key=privacy_x)
    if len(front) > 1:
        ax.step([privacy_x(r) for r in front], [r.accuracy for r in front], where="post",
                color="#c0392b", lw=1.2, label="Pareto front")  # fmt: skip
    if baseline is not None and by_ssim:
        ax.axvline(
            baseline, color="#7f8c8d", ls="--", lw=1, label=f"no-information baseline ({baseline:.3f})"
        )
    ax.set_xlim(right=max(privacy_x(r) for r in points) + 0.25)  # room for the labels right of the points
    leaked = "mean margin of the strongest attack above the no-information score (lower: more private)"
    ax.set_xlabel("SSIM under the strongest attack (lower: more private)" if by_ssim else leaked)
    ax.set_ylabel("test accuracy after FL training under the defense")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # below the axes: inside, it hid labels of points it covered
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3, fontsize=8, frameon=False)
    fig.tight_layout()
    place_labels(ax, label_groups(points), [(privacy_x(r), r.accuracy) for r in points])  # type: ignore[arg-type]
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
        guess=guess_text(config.metrics.no_information),
    )
    if any("class_ssim" in r.metrics for r in records):
        sizes = sorted({int(r.metrics["samples"]) for r in records if "samples" in r.metrics})
        text += CLASS_SSIM_CONVENTION.format(samples=" / ".join(map(str, sizes)))
    note = next((r.metrics.get("lpips_note") for r in records if r.metrics.get("lpips_note")), None)
    text += f" LPIPS: {note}" if note else " LPIPS: AlexNet backbone (metrics.lpips)."
    return text


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
        "<table><tr><th>attack</th><th>round</th><th>threat model</th><th>leaked victims (all seeds)</th>"
        "<th>seeds with a leak</th><th>SSIM</th><th>PSNR</th></tr>"
    )
    for s in sorted(row.scores, key=lambda s: (-s.ssim, s.attack, s.round)):
        psnr = "—" if s.psnr is None else f"{s.psnr:.2f}"
        seeds = s.leak.seeds_text() if s.outcomes else "—"
        parts.append(f"<tr><td>{html.escape(s.where.split('@')[0])}</td><td>{html.escape(s.where.split('@')[1])}"
                     f"</td><td>{s.threat}</td><td>{html.escape(leak_text(s))}</td><td>{seeds}</td>"
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


def load_scenarios_of(run_dir: Path, scenarios: list[tuple[str, dict]]) -> list[Scenario]:
    """The stored cells of each scenario run under ``run_dir/scenarios/<name>`` (missing ones skipped)."""
    out = []
    for name, about in scenarios:
        where = run_dir / "scenarios" / name
        if (where / STORE_FILE).is_file():
            records = ResultStore(where / STORE_FILE).records()
            out.append(Scenario(name, str(about.get("title", name)), bool(about.get("ranked")), records))
    return out


def build_leaderboard(
    run_dir: str | Path, preset: str = "custom", scenarios: list[tuple[str, dict]] | None = None
) -> LeaderboardFiles:
    """Write the leaderboard files into ``run_dir`` from its stored cells and its scenarios' (``scenarios``:
    (name, description) of each, as the preset defines them)."""
    run_dir = Path(run_dir)
    config = load_run_config(run_dir)
    store = ResultStore(run_dir / STORE_FILE)
    store.check(config.fingerprint())
    records = store.records()
    restore_missing_images(run_dir, records)
    found = load_scenarios_of(run_dir, scenarios or [])
    second = load_stage_two(run_dir)
    found += as_scenarios(second)
    ranked = ranked_records(records, [r for s in found if s.ranked for r in s.records])
    rows = standings(ranked)
    tables = results_tables(records, found)
    baseline = baseline_ssim(records)
    every = [*records, *(r for s in found for r in s.records)]
    facts = run_facts(every, config.name, preset, config.fingerprint())
    honest = _honest(records)
    plot = frontier_png(standings(ranked, honest) if honest else rows, baseline)
    text = load_text_section(run_dir)
    text_found = text_tables(*text) if text is not None else []
    pages = []
    links = {}
    for row in rows:
        page = f"leaderboard/{slug(row.model + '__' + row.defense)}.html"
        path = run_dir / page
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, _defense_page(run_dir, row, ranked, config.name).encode())
        pages.append(path)
        links[f"{row.model} · {row.defense}"] = page
    failed = [r for r in every if r.status != "ok"]
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>leakshield leaderboard: "
        f"{html.escape(config.name)}</title>{STYLE}</head><body>",
        f"<h1>leakshield leaderboard: {html.escape(config.name)}</h1>",
        f"<p class='box'>Run finished {facts['finished']} · leakshield {facts['leakshield']} · "
        f"{html.escape(source_line(facts).replace('`', ''))} · torch {facts['torch']} · "
        f"{html.escape(facts['machine'])} · {len(every)} cells ({len(failed)} failed) in the main grid "
        f"and {len(found) - len(second)} scenario(s), {len(second)} stage-2 rerun(s), "
        f"{facts['cell_seconds']:.0f} s of cell time · config fingerprint "
        f"{facts['fingerprint']}</p>",
        f"<p>{html.escape(reading_note(records))}</p>",
        "<h2>Rankings, one per threat model</h2>",
        *(html_table(t, links) for t in tables if not t.title.startswith("Realism")),
        "<h2>Privacy–utility frontier (honest-but-curious server)</h2>",
        _img(plot, "privacy-utility frontier")
        if plot
        else "<p>No defense has both an attack score and an accuracy.</p>",
        "<h2>Text: federated language models</h2>",
        *(html_table(t) for t in text_found),
        _text_intro(text),
        "<h2>Realism: does the picture survive realistic settings?</h2>",
        *(html_table(t) for t in tables if t.title.startswith("Realism")),
        "<h2>Attacks and their threat models</h2>",
        _attack_table(every),
        f"<h2>Metric conventions</h2><p class='box'>{html.escape(_conventions(run_dir, records))}</p>",
        "<p>Full per-cell table: <a href='report.html'>report.html</a>, "
        "<a href='results.csv'>results.csv</a>.</p>",
        "</body></html>",
    ]
    files = LeaderboardFiles(
        run_dir / "leaderboard.html", run_dir / "leaderboard.md", run_dir / "leaderboard.json", pages
    )
    atomic_write_bytes(files.html, "\n".join(parts).encode())
    text_md = "".join("\n" + markdown(t) for t in text_found)
    atomic_write_bytes(
        files.markdown, f"# {config.name}\n\n{results_markdown(records, found)}{text_md}".encode()
    )
    preset_scenarios = [s for s in found if not s.name.startswith(STAGE_TWO_PREFIX)]
    provenance = provenance_table(
        [(config, records)]
        + [(load_run_config(run_dir / "scenarios" / s.name), s.records) for s in preset_scenarios]
        + [(load_run_config(run_dir / FOLDER / rerun.name), cells) for rerun, cells in second]
        + ([(found, text[0]) for found in [_text_config(run_dir)] if found is not None] if text else [])
    )
    reruns = [(rerun.as_json(), cells) for rerun, cells in second]
    exported = export_json(records, facts, preset_scenarios, provenance, text, reruns)
    atomic_write_bytes(files.json, exported.encode())
    return files


def load_text_section(run_dir: Path) -> tuple[list[CellRecord], int] | None:
    """The text section's cells under ``run_dir/text`` and its trained state's rounds (None: no text run)."""
    where = run_dir / "text"
    if not (where / STORE_FILE).is_file():
        return None
    stored = json.loads((where / "config.json").read_text()).get("config", {})
    return ResultStore(where / STORE_FILE).records(), int((stored.get("training") or {}).get("rounds", 0))


def _text_config(run_dir: Path) -> Any:
    """The text section's config as its run directory stored it (None, said so, when this code no longer
    reads it: its cells' stamps are then left out of the provenance table, and a check reads them as
    computed by code the export does not describe)."""
    from leakshield.text_grid.config import parse_text_config

    where = run_dir / "text" / "config.json"
    try:
        return parse_text_config(json.loads(where.read_text()).get("config"), source=str(where))
    except (LeakshieldError, ValueError) as exc:
        warnings.warn(f"text provenance left out: {exc}", stacklevel=2)
        return None


def _text_intro(text: tuple[list[CellRecord], int] | None) -> str:
    if text is None:
        return ("<p>No text section in this run: the preset has none, or the corpus or the text extra was "
                "missing (<code>leakshield leaderboard --corpus FILE</code>).</p>")  # fmt: skip
    records, _ = text
    failed = sum(r.status != "ok" for r in records)
    return (f"<p>{len(records)} text cells ({failed} failed); every cell, with reconstructed texts beside "
            "the truth: <a href='text/report.html'>text/report.html</a>.</p>")  # fmt: skip


def _honest(records: list[CellRecord]) -> str | None:
    from leakshield.leaderboard.ranking import threats

    found = threats(records)
    return found[0] if found and found[0].startswith("honest") else None
