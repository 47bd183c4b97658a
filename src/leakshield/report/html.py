"""Build a run's report: results.csv, table.md and a self-contained report.html."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path

from leakshield.errors import RunDirectoryError
from leakshield.experiment.rundir import STORE_FILE, load_run_config
from leakshield.experiment.store import CellRecord, ResultStore, atomic_write_bytes
from leakshield.report.figures import privacy_utility_png, sweep_png
from leakshield.report.filter_log import filter_html, filter_markdown
from leakshield.report.tables import baselines_by_batch, is_number, joined_rows, left_out, pivot, results_csv
from leakshield.report.threat_tables import html_sections, markdown_sections

CONVENTIONS = (
    "Images are compared in [0, 1] pixel space after Hungarian matching of reconstructions to the "
    "true images (on {match_on}). PSNR: per image, images clamped to [0, 1], data range 1, capped at "
    "100 dB. SSIM: 11×11 Gaussian window (σ 1.5), K1 0.01, K2 0.03, mean over the valid region "
    "(scikit-image's convention). ASR: share of images with SSIM ≥ {asr}. {accuracy} The "
    "no-information baseline scores {guess} as every reconstruction: an "
    "attack that does not beat it learned nothing about the victims. Values are means over victims "
    "(± std over seeds or other unlisted dimensions)."
)
AGGREGATE_CONVENTION = (
    " Secure aggregation (fl.secure_aggregation): the server saw the sum of the victim's update and those "
    "of the other clients of its aggregate; every sample of the aggregate competes for the reconstructions "
    "(one Hungarian assignment on pixel MSE), and the victim's samples are scored on the images they "
    "claim, so another client's recovered sample never counts as the victim's. Each batch size has its "
    "own baseline."
)
CLASS_SSIM_CONVENTION = (
    " Class-level SSIM (Anti-GAN Eq. 5, GAN attacks): each generated image's mean SSIM to every private "
    "image of its class, averaged over {samples} generated images spread evenly over the attacked classes; "
    "uniform 8×8 window at every valid position, K1 0.01, K2 0.03, population covariances, data range 1 "
    "(no scikit-image equivalent: it takes odd windows only). class_ssim_public scores the public split's "
    "real images of the same classes: what a generator that learned the class distribution would reach."
)


@dataclass(frozen=True)
class ReportFiles:
    csv: Path
    markdown: Path
    html: Path


def guess_text(no_information: str) -> str:
    """The no-information guess of ``metrics.no_information``, in the conventions' words."""
    if no_information == "leave-one-out":
        return "the mean of the dataset's other images (those outside the victim's batch)"
    return "the mean image of the public split"


def _img(data: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode()}">'


def _number(value: object, spec: str) -> str:
    """``value`` formatted, or n/a where it is missing or was not finite (stored as null)."""
    return format(value, spec) if isinstance(value, int | float) else "n/a"


def restore_missing_images(run_dir: Path, records: list) -> int:
    """Rewrite the image files of stored cells that are missing (deleted, not copied along) from the
    PNG each row keeps; returns how many were restored."""
    restored = 0
    for record in records:
        if record.images and record.image_png and not (run_dir / record.images).is_file():
            try:
                atomic_write_bytes(run_dir / record.images, record.image_png)
            except OSError as exc:
                raise RunDirectoryError(
                    f"{run_dir}: cannot restore {record.images} ({exc.strerror or exc}); is images/ a file?"
                ) from None
            restored += 1
    return restored


def build_report(run_dir: str | Path) -> ReportFiles:
    """Write ``results.csv``, ``table.md`` and ``report.html`` into ``run_dir`` from its stored cells."""
    run_dir = Path(run_dir)
    config = load_run_config(run_dir)
    store = ResultStore(run_dir / STORE_FILE)
    store.check(config.fingerprint())  # a store copied from another run: refuse, never mislabel
    records = store.records()
    restore_missing_images(run_dir, records)
    rows, baseline = joined_rows(records)
    layout = config.report
    table = pivot(
        rows,
        baseline,
        row_dims=list(layout.rows),
        column_dims=list(layout.columns),
        values=list(layout.values),
        baseline_by_batch=baselines_by_batch(records),
    )
    rounds = config.utility.rounds
    if not rounds:
        accuracy = "Accuracy: not measured (utility.rounds is 0)."
    elif not any(r.kind == "utility" for r in records):  # e.g. an audit of a federation's replies
        accuracy = "Accuracy: not measured in this run."
    else:
        accuracy = (
            f"Accuracy: test accuracy after {rounds} FL rounds under the defense; ADR = (acc_none − "
            "acc_defense) / acc_none."
        )
    conventions = CONVENTIONS.format(
        match_on=config.metrics.match_on,
        asr=config.metrics.asr_threshold,
        accuracy=accuracy,
        guess=guess_text(config.metrics.no_information),
    )
    if config.fl.secure_aggregation:
        conventions += AGGREGATE_CONVENTION
    sizes = sorted({int(r.metrics["samples"]) for r in records if is_number(r.metrics.get("samples"))})
    if sizes:
        conventions += CLASS_SSIM_CONVENTION.format(samples=" / ".join(map(str, sizes)))
    lpips_note = next((r.metrics.get("lpips_note") for r in records if r.metrics.get("lpips_note")), None)
    failed = [r for r in records if r.status == "failed"]

    markdown = [f"# {config.name}\n", table.to_markdown(), f"\n{conventions}\n", markdown_sections(records)]
    markdown.append(filter_markdown(run_dir))
    if lpips_note:
        markdown.append(f"\nLPIPS: {lpips_note}\n")
    if failed:
        markdown.append(f"\n{len(failed)} failed cell(s): see results.csv.\n")
    omitted = left_out(records)
    if omitted:
        markdown.append(f"\n{omitted}\n")

    files = ReportFiles(run_dir / "results.csv", run_dir / "table.md", run_dir / "report.html")
    atomic_write_bytes(files.csv, results_csv(records).encode())
    atomic_write_bytes(files.markdown, "".join(markdown).encode())
    atomic_write_bytes(
        files.html,
        _html(
            config.name,
            table.to_html(),
            conventions,
            lpips_note,
            rows,
            baseline,
            records,
            run_dir,
            config.report.scatter,
            config.report.sweeps,
            "leave-one-out mean" if config.metrics.no_information == "leave-one-out" else "mean public image",
        ).encode(),
    )
    return files


def _html(
    name,
    table_html,
    conventions,
    lpips_note,
    rows,
    baseline,
    records: list[CellRecord],
    run_dir: Path,
    scatter_metric: str,
    sweeps: list = (),
    guess_caption: str = "mean public image",
) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>leakshield report: {html.escape(name)}</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:4px 8px;"
        "text-align:right}td:first-child,th:first-child{text-align:left}"
        "figure{display:inline-block;margin:0 1em 1em 0}figcaption{font-size:90%}"
        "img{image-rendering:pixelated}.err{color:#a00}</style></head><body>",
        f"<h1>leakshield report: {html.escape(name)}</h1>",
        "<h2>Results</h2>",
        table_html,
        f"<p>{html.escape(conventions)}</p>",
    ]
    if lpips_note:
        parts.append(f"<p>LPIPS: {html.escape(lpips_note)}</p>")
    omitted = left_out(records)
    if omitted:
        parts.append(f"<p class='err'>{html.escape(omitted)}</p>")
    parts.append(html_sections(records))
    parts.append(filter_html(run_dir))
    plot = privacy_utility_png(rows, baseline, scatter_metric)
    parts.append("<h2>Privacy–utility</h2>")
    parts.append(
        _img(plot, "privacy-utility scatter")
        if plot
        else "<p>No cell has both an attack score and an accuracy (utility.rounds = 0?).</p>"
    )
    for sweep in sweeps:
        png = sweep_png(rows, sweep.title, sweep.parameter, sweep.points, sweep.metrics)
        parts.append(f"<h2>{html.escape(sweep.title)}</h2>")
        parts.append(_img(png, sweep.title) if png else "<p>No finished cell has these numbers yet.</p>")
    parts.append(
        "<h2>Reconstructions</h2><p>Rows: true images, defended inputs (when the defense "
        "changed them), reconstructions matched to the truth. GAN attacks: per attacked class, a row of "
        "private images and a row of the attacker's samples.</p>"
    )
    for r in records:
        if r.images and (run_dir / r.images).is_file():
            caption = (
                f"no-information baseline ({guess_caption})"
                if r.kind == "baseline"
                else f"{r.model} · {r.defense} · {r.attack} · round {r.round} · seed {r.seed}"
            )
            psnr, ssim = _number(r.metrics.get("psnr"), ".2f"), _number(r.metrics.get("ssim"), ".3f")
            stats = f"PSNR {psnr} dB, SSIM {ssim}"
            if "class_ssim" in r.metrics:
                samples = _number(r.metrics.get("samples"), ".0f")
                stats = f"class-level SSIM {_number(r.metrics['class_ssim'], '.3f')} ({samples} samples)"
            parts.append(
                f"<figure>{_img((run_dir / r.images).read_bytes(), caption)}"
                f"<figcaption>{html.escape(caption)}<br>{stats}</figcaption></figure>"
            )
    failed = [r for r in records if r.status == "failed"]
    if failed:
        parts.append("<h2>Failed cells</h2><ul>")
        parts += [f"<li class='err'>{html.escape(r.key)}: {html.escape(r.error or '')}</li>" for r in failed]
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)
