"""Result tables: a flat CSV of every cell, and pivot tables whose rows and columns are configurable
(any of model, defense, attack, round, seed, batch, clients, metric), so a paper's table layout can be
reproduced."""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from itertools import product

from leakshield.experiment.axes import Scale
from leakshield.experiment.store import CellRecord
from leakshield.metrics.registry import METRICS, UTILITY_COLUMNS

DIMENSIONS = ("model", "defense", "attack", "round", "seed", "batch", "clients")
BASELINE_LABEL = "no-information baseline"
LEADING_COLUMNS = ["kind", "model", "defense", "attack", "round", "seed", "status", "seconds"]
#: the scale axes' columns, after ``seed``, in runs that have them
SCALE_COLUMNS = ["batch", "clients"]


@dataclass(frozen=True)
class Row:
    """One attack cell joined with the utility of its model/defense/seed (a point of a table)."""

    coords: dict[str, object]
    metrics: dict[str, float]


def joined_rows(records: list[CellRecord]) -> tuple[list[Row], dict[str, float]]:
    """Attack cells with the utility of their model/defense/seed joined in (``accuracy``,
    ``accuracy_train``, ``accuracy_sensitive``, ``adr``, and ``epsilon``/``delta`` for defenses with a DP
    guarantee), and the baseline's metrics. ADR compares with the defense labelled ``none`` for the same
    model and seed."""
    ok = [r for r in records if r.status == "ok"]
    utility = {(r.model, r.defense, r.seed): r.metrics for r in ok if r.kind == "utility"}
    baseline = next((r.metrics for r in ok if r.kind == "baseline"), {})
    rows = []
    for r in ok:
        if r.kind != "attack":
            continue
        metrics = {k: v for k, v in r.metrics.items() if is_number(v)}
        util = utility.get((r.model, r.defense, r.seed), {})
        clean = utility.get((r.model, "none", r.seed), {}).get("accuracy")
        metrics.update({k: v for k, v in util.items() if k in UTILITY_COLUMNS and is_number(v)})
        if is_number(clean) and clean and is_number(util.get("accuracy")):
            metrics["adr"] = (clean - util["accuracy"]) / clean
        scale = Scale.parse(r.scale) or Scale()
        coords = {
            "model": r.model,
            "defense": r.defense,
            "attack": r.attack,
            "round": r.round,
            "seed": r.seed,
            "batch": scale.batch,
            "clients": scale.clients,
        }
        rows.append(Row(coords, metrics))
    return rows, {k: v for k, v in baseline.items() if is_number(v)}


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def left_out(records: list[CellRecord]) -> str | None:
    """A sentence counting the stored cells the means leave out though they are not failed cells (those
    are listed apart): an unknown status, or a registered metric holding something other than a number —
    None when there are none. Never silent: a table without them must say so."""
    unknown = [r for r in records if r.status not in ("ok", "failed")]
    wrong = [(r, name) for r in records if r.status == "ok" for name, value in r.metrics.items()
             if METRICS.find(name) is not None and value is not None and not is_number(value)]  # fmt: skip
    if not unknown and not wrong:
        return None
    parts = []
    if unknown:
        statuses = ", ".join(sorted({repr(r.status) for r in unknown}))
        parts.append(f"{len(unknown)} with an unknown status ({statuses}; known: 'ok', 'failed')")
    if wrong:
        cells, names = len({r.key for r, _ in wrong}), ", ".join(sorted({n for _, n in wrong}))
        parts.append(f"{cells} whose metric(s) {names} are not numbers (those values only)")
    return f"Left out of the means: {'; '.join(parts)}. The store was written by other code or edited."


def baselines_by_batch(records: list[CellRecord]) -> dict[int, dict[str, float]]:
    """The no-information baseline of each batch size of a run with a batch-size axis (else empty)."""
    out = {}
    for r in records:
        scale = Scale.parse(r.scale)
        if r.kind == "baseline" and r.status == "ok" and scale is not None and scale.batch is not None:
            out[scale.batch] = {k: v for k, v in r.metrics.items() if isinstance(v, int | float)}
    return out


def format_value(metric: str, values: list[float]) -> str:
    """Mean (± standard deviation over several values), with a metric-appropriate precision."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if math.inf in values:  # ε of a DP defense without noise (σ 0): no privacy, not "not measured"
        return "∞"
    if not finite:
        return "n/a"
    digits = METRICS.precision(metric)
    mean = statistics.fmean(finite)
    if len(finite) > 1:
        return f"{mean:.{digits}f} ± {statistics.stdev(finite):.{digits}f}"
    return f"{mean:.{digits}f}"


@dataclass(frozen=True)
class PivotTable:
    header: list[str]
    body: list[list[str]]

    def to_markdown(self) -> str:
        lines = ["| " + " | ".join(self.header) + " |", "|" + "---|" * len(self.header)]
        lines += ["| " + " | ".join(row) + " |" for row in self.body]
        return "\n".join(lines) + "\n"

    def to_html(self) -> str:
        head = "".join(f"<th>{_esc(h)}</th>" for h in self.header)
        body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>" for row in self.body)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def pivot(
    rows: list[Row],
    baseline: dict[str, float],
    *,
    row_dims: list[str],
    column_dims: list[str],
    values: list[str],
    baseline_by_batch: dict[int, dict[str, float]] | None = None,
) -> PivotTable:
    """Group ``rows`` by ``row_dims`` × ``column_dims`` (``metric`` may be either, else it joins the
    columns) and show the mean (± std over the remaining dimensions, e.g. seeds) of each value.

    The no-information baseline is a row of its own (or a column, when the rows are metrics only); it
    has only image metrics, so utility values show as ``—`` there. With ``baseline_by_batch`` (a run
    with a batch-size axis) and ``batch`` among the columns, each column shows its own batch's baseline.
    """
    if "metric" not in row_dims and "metric" not in column_dims:
        column_dims = [*column_dims, "metric"]

    def levels(dim: str) -> list[object]:
        if dim == "metric":
            return list(values)
        seen: list[object] = []
        for r in rows:
            if r.coords[dim] not in seen:
                seen.append(r.coords[dim])
        return seen

    cells: dict[tuple, list[float]] = defaultdict(list)
    for r in rows:
        for metric in values:
            if metric in r.metrics:
                key = tuple((d, metric if d == "metric" else r.coords[d]) for d in row_dims + column_dims)
                cells[key].append(r.metrics[metric])

    row_keys = list(product(*(levels(d) for d in row_dims)))
    col_keys = list(product(*(levels(d) for d in column_dims)))
    baseline_is_row = any(d != "metric" for d in row_dims)

    def label(key: tuple, dims: list[str]) -> str:
        named = [f"{d} {k}" if d in ("batch", "clients") else str(k) for d, k in zip(dims, key, strict=True)]
        return " · ".join(named) or "value"

    def metric_of(rkey: tuple, ckey: tuple) -> str:
        coords = dict(zip(row_dims + column_dims, rkey + ckey, strict=True))
        return str(coords["metric"])

    def baseline_cell(metric: str, ckey: tuple = (), batch: int | None = None) -> str:
        coords = dict(zip(column_dims, ckey, strict=False))
        chosen = batch if batch is not None else coords.get("batch")
        values_of = (baseline_by_batch or {}).get(chosen, baseline)  # type: ignore[arg-type]
        return format_value(metric, [values_of[metric]]) if metric in values_of else "—"

    header = [" · ".join(row_dims) or "", *(label(c, column_dims) for c in col_keys)]
    body, kept = [], []
    for rkey in row_keys:
        line = [label(rkey, row_dims)]
        filled = False
        for ckey in col_keys:
            key = tuple(zip(row_dims + column_dims, rkey + ckey, strict=True))
            filled |= key in cells
            line.append(format_value(metric_of(rkey, ckey), cells[key]) if key in cells else "—")
        if filled or not rows:  # combinations the grid never ran (e.g. an adaptive attack elsewhere)
            body.append(line)
            kept.append(rkey)
    if baseline and baseline_is_row:
        # a batch-size row dimension: one baseline row per batch size, each with its own values
        batches = sorted(baseline_by_batch or {}) if "batch" in row_dims else []
        for batch in batches or [None]:
            for m in values if "metric" in row_dims else [None]:
                parts = (BASELINE_LABEL, f"batch {batch}" if batch is not None else "", m or "")
                line = [" · ".join(x for x in parts if x)]
                for ckey in col_keys:
                    metric = m or str(dict(zip(column_dims, ckey, strict=True))["metric"])
                    line.append(baseline_cell(metric, ckey, batch))
                body.append(line)
    elif baseline:  # the rows are metrics only: the baseline becomes a column
        header.append(BASELINE_LABEL)
        for line, rkey in zip(body, kept, strict=True):
            line.append(baseline_cell(str(dict(zip(row_dims, rkey, strict=True))["metric"])))
    return PivotTable(header, body)


def results_csv(records: list[CellRecord]) -> str:
    """Every cell, one line each, with every metric it recorded (``batch`` and ``clients`` after ``seed``
    when the run has scale axes)."""
    metric_names = sorted({k for r in records for k, v in r.metrics.items() if isinstance(v, int | float)})
    scaled = any(r.scale for r in records)
    leading = LEADING_COLUMNS[:6] + (SCALE_COLUMNS if scaled else []) + LEADING_COLUMNS[6:]
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow([*leading, *metric_names, "error"])
    for r in records:
        scale = _scale_columns(r.scale) if scaled else []
        writer.writerow(
            [r.kind, r.model, r.defense, r.attack, r.round, r.seed, *scale, r.status, f"{r.seconds:.2f}"]
            + [_csv_value(r.metrics.get(m)) for m in metric_names]
            + [r.error or ""]
        )
    return out.getvalue()


def _scale_columns(label: str | None) -> list[str]:
    scale = Scale.parse(label) or Scale()
    return ["" if v is None else str(v) for v in (scale.batch, scale.clients)]


def _csv_value(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
