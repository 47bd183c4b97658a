"""The membership section written out: a Markdown page, an HTML page with the ROC figures, the figures
(log–log ROC of each row's strongest cell on stage-2 candidates, the seeds' curves averaged at each FPR,
with the DP ceiling of every row that has an ε) and a JSON export of the tables and their numbers."""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from leakshield.membership.config import MembershipConfig
from leakshield.membership.roc import chance_tpr
from leakshield.membership.run import SeedRun
from leakshield.membership.section import THREATS, Standing, rank, standing, table_rows

FIGURE = "membership_roc_{threat}.png"


def tables(
    config: MembershipConfig, runs: dict[str, list[SeedRun]]
) -> dict[str, tuple[list[Standing], bool]]:
    """Per threat table: its ranked rows and whether the positive control passed."""
    out = {}
    for threat in THREATS:
        rows = [
            standing(row.label, threat, runs[row.label], config.fpr)
            for row in config.rows
            if runs.get(row.label)
        ]
        out[threat] = rank(rows, config.fpr)
    return out


def roc_figure(rows: Sequence[Standing], path: Path, title: str) -> None:
    """Log–log ROC curves of each row's strongest cell (stage 2, the seeds' curves averaged at each FPR);
    dashed: the DP ceiling of rows with an ε."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from leakshield.membership.ceiling import dp_ceiling

    fig, ax = plt.subplots(figsize=(6.4, 5.2), dpi=110)
    ax.set_prop_cycle(color=plt.get_cmap("tab20").colors)  # distinct colors for up to 20 rows
    grid = np.logspace(-3, 0, 200)
    ax.plot(grid, grid, color="0.6", lw=1, ls=":", label="chance")
    for r in rows:
        if r.roc is None:
            continue
        shown = r.roc.fpr >= 1e-3  # the grid's FPR 0 point is off a log axis
        line = ax.plot(r.roc.fpr[shown], np.clip(r.roc.tpr[shown], 1e-3, 1), lw=1.5,
                       label=f"{r.row} ({r.strongest})")[0]  # fmt: skip
        if r.epsilon is not None and r.delta is not None and not math.isinf(r.epsilon):
            ax.plot(grid, np.clip(dp_ceiling(grid, r.epsilon, r.delta), 1e-3, 1), ls="--", lw=1,
                    color=line.get_color(), label=f"DP ceiling ε = {r.epsilon:.2f}")  # fmt: skip
    ax.set(xscale="log", yscale="log", xlim=(1e-3, 1), ylim=(1e-3, 1.02), xlabel="false positive rate",
           ylabel="true positive rate", title=title)  # fmt: skip
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _params(values: dict) -> str:
    return "(" + ", ".join(f"{k} {v}" for k, v in values.items()) + ")" if values else ""


def _setting(config: MembershipConfig) -> str:
    local = config.local
    return (f"{config.dataset} {_params(config.dataset_params)}, model {config.model.name} "
            f"{_params(config.model.params)}; "
            f"{config.clients} clients of {config.records_per_client} pooled records (half members), "
            f"{config.rounds} rounds of {local.algorithm} ({local.local_epochs} local epochs, batch "
            f"{local.batch_size}, lr {local.local_lr}); seeds {config.seeds}; one-round attacks at rounds "
            f"{config.rounds_attacked}")  # fmt: skip


NOTE = ("Strongest attack: chosen per row on stage-1 candidates (the first half of the clients); every "
        "number after it is measured on stage-2 candidates (the other half). ± : 95 % t-interval over "
        "seeds. vs none: difference in TPR from no defense with its simultaneous interval; * = lower than "
        "no defense (one-sided paired t over seeds, Holm, α 0.02). Rows sharing a letter were not shown "
        "different. DP ceiling: the largest TPR the row's (ε, δ) allows at this FPR; audit: the ε the "
        "measured ROC forces at 95 % confidence (Clopper–Pearson, Bonferroni, records as independent "
        "trials: a heuristic), which a sound accountant and attack never exceed.")  # fmt: skip


def note(rows: Sequence[Standing], fpr: float) -> str:
    """The table's note, with the chance level a guess scores at its stage-2 size."""
    sizes = [r.nonmembers for r in rows if r.nonmembers]
    if not sizes:
        return NOTE
    n = min(sizes)
    return (
        f"{NOTE} With {n} non-members per seed, a threshold at {fpr * 100:g} % FPR flags at most "
        f"{int(fpr * n + 1e-9)} of them, and a guess scores TPR {chance_tpr(n, fpr):.3f}."
    )


def _numbers(r: Standing) -> dict:
    """A row's numbers for the JSON export (the table's cells are text)."""
    interval = lambda e: None if e is None else {"mean": e.mean, "half_width": e.half_width, "n": e.n}  # noqa: E731
    return {
        "row": r.row, "place": r.place, "trains": r.trains, "strongest": r.strongest,
        "tpr_per_seed": {str(k): v for k, v in r.per_seed.items()}, "tpr": interval(r.tpr),
        "tpr_lowest": interval(r.tpr_lowest), "auc": interval(r.auc), "accuracy": interval(r.accuracy),
        "chance_accuracy": r.chance_accuracy, "epsilon": r.epsilon, "delta": r.delta,
        "epsilon_unit": r.epsilon_unit,
        "dp_ceiling": r.ceiling, "epsilon_low": r.audit.epsilon_low if r.audit else None,
        "difference": None if r.difference is None else {"mean": r.difference.mean, "low": r.difference.low,
                                                         "high": r.difference.high, "p": r.difference.p,
                                                         "less": r.difference.less},
        "nonmembers_per_seed": r.nonmembers,
    }  # fmt: skip


def _html_row(cells: Sequence[str]) -> str:
    return "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>"


STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:78em}"
    "table{border-collapse:collapse;font-size:13px}"
    "td,th{border:1px solid #ccc;padding:3px 6px;text-align:left}th{background:#f3f3f3}"
    ".note{font-size:12px;color:#444;max-width:70em}img{max-width:640px;display:block;margin:1em 0}"
)


def write(config: MembershipConfig, runs: dict[str, list[SeedRun]], out: Path, command: str) -> list[Path]:
    """Write ``membership.md``, ``membership.html``, the figures and ``membership.json`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    ranked = tables(config, runs)
    md = ["# Would a server learn who was in the data?", "", f"Setting: {_setting(config)}.", "",
          f"Command: `{command}`", ""]  # fmt: skip
    body = [f"<h1>Would a server learn who was in the data?</h1><p>Setting: {html.escape(_setting(config))}."
            f"</p><p>Command: <code>{html.escape(command)}</code></p>"]  # fmt: skip
    export = {"setting": config.model_dump(mode="json"), "command": command, "tables": {}}
    written = []
    for threat, (rows, control) in ranked.items():
        title = THREATS[threat][0]
        head, cells = table_rows(rows, config.fpr, control)
        figure = out / FIGURE.format(threat=threat)
        roc_figure(rows, figure, title)
        written.append(figure)
        md += [f"## {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        md += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in cells]
        md += ["", note(rows, config.fpr), "", f"![ROC curves, {title}]({figure.name})", ""]
        body.append(f"<h2>{html.escape(title)}</h2><table><thead><tr>"
                    + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr></thead><tbody>"
                    + "".join(_html_row(row) for row in cells)
                    + f"</tbody></table><p class='note'>{html.escape(note(rows, config.fpr))}</p>"
                    f"<img src='{figure.name}' alt='ROC curves, {html.escape(title)}'>")  # fmt: skip
        export["tables"][threat] = {"title": title, "control": control, "header": head, "rows": cells,
                                    "values": [_numbers(r) for r in rows]}  # fmt: skip
    pages = {
        "membership.md": "\n".join(md),
        "membership.html": f"<!doctype html><html><head><meta charset='utf-8'><title>Membership</title>"
        f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>",
        "membership.json": json.dumps(export, indent=1, ensure_ascii=False),
    }
    for name, text in pages.items():
        (out / name).write_text(text, encoding="utf-8")
        written.append(out / name)
    return written
