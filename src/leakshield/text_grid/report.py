"""The report of a text grid: one table row per cell (ROUGE beside the no-information guess, the bag's
recall, the share of victims whose client guard refused the model sent, the model's test accuracy, ε
where DP-SGD trained it, seconds per victim) and, per cell at its smallest batch, the first victim's
text beside its reconstruction; Markdown and a standalone HTML page."""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass
from pathlib import Path

from leakshield.errors import RunDirectoryError
from leakshield.experiment.config import DefenseSetting
from leakshield.experiment.rundir import CONFIG_FILE, STORE_FILE
from leakshield.experiment.store import CellRecord, ResultStore, atomic_write_bytes

COLUMNS = (
    "seed",
    "model",
    "state",
    "defense",
    "attack",
    "batch",
    "n",
    "ROUGE-1",
    "ROUGE-2",
    "guess R-1",
    "exact",
    "bag recall",
    "refused",
    "test acc",
    "ε",
    "s/victim",
)
#: how many examples the report shows per cell
EXAMPLES = 2


@dataclass(frozen=True)
class TextReportFiles:
    markdown: Path
    html: Path


def is_text_run(run_dir: str | Path) -> bool:
    """Whether ``run_dir`` holds a text grid's run (its stored config says ``track: text``)."""
    marker = Path(run_dir) / CONFIG_FILE
    try:
        return json.loads(marker.read_text())["config"].get("track") == "text"
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _fmt(value: object, digits: int = 3) -> str:
    if value is None:
        return "–"
    if value == math.inf:
        return "∞"  # the ε of a DP defense without noise
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _batch(record: CellRecord) -> int:
    return int((record.scale or "batch=0").split()[0].removeprefix("batch="))


def _cell(text: object) -> str:
    """A table cell's text: one line, without the Markdown column bar."""
    return " ".join(str(text).split()).replace("|", "/")


def ordered(records: list[CellRecord], config: dict | None = None) -> list[CellRecord]:
    """Cells in the config's order (seed, model, state, defense, attack, then batch size ascending)."""
    config = config or {}
    labels = {
        "seeds": config.get("seeds", []),
        "models": [m.get("label") or m.get("name") for m in config.get("models", [])],
        "states": config.get("states", []),
        "defenses": [DefenseSetting.model_validate(d).display for d in config.get("defenses", [])],
        "attacks": [a.get("label") or a.get("name") for a in config.get("attacks", [])],
    }

    def rank(section: str, value: object) -> int:
        known = labels[section]
        return known.index(value) if value in known else len(known)

    return sorted(records, key=lambda r: (rank("seeds", r.seed), rank("models", r.model),
                                          rank("states", r.environment.get("state")),
                                          rank("defenses", r.defense), rank("attacks", r.attack), _batch(r),
                                          r.key))  # fmt: skip


def table_rows(records: list[CellRecord], config: dict | None = None) -> list[list[str]]:
    """One row of :data:`COLUMNS` per cell in the config's order (failed cells show their error)."""
    rows = []
    for r in ordered(records, config):
        where = [
            str(r.seed),
            str(r.model),
            str(r.environment.get("state", "?")),
            str(r.defense),
            str(r.attack),
            str(_batch(r)),
        ]
        m = r.metrics
        if r.status != "ok":
            rows.append(
                [_cell(v) for v in where]
                + ["failed: " + _cell(r.error)[:80]]
                + [""] * (len(COLUMNS) - len(where) - 1)
            )
            continue
        found = [
            _fmt(m.get("scored")),
            _fmt(m.get("rouge1")),
            _fmt(m.get("rouge2")),
            _fmt(m.get("floor_rouge1")),
            _fmt(m.get("exact"), 2),
            _fmt(m.get("bag_recall")),
            _fmt(m.get("refused"), 2),
            _fmt(m.get("accuracy")),
            _fmt(m.get("epsilon"), 2),
            _fmt(m.get("seconds_per_victim"), 2),
        ]
        rows.append([_cell(v) for v in where + found])
    return rows


def markdown_table(records: list[CellRecord], config: dict | None = None) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(records, config)]
    return "\n".join(lines)


def _examples(records: list[CellRecord], config: dict) -> list[tuple[str, str, str]]:
    """(cell, truth, reconstruction) of the first victims of each ok cell at its smallest batch."""
    smallest: dict[tuple, CellRecord] = {}
    for r in ordered(records, config):  # the smallest batch of each comes first
        if r.status == "ok":
            smallest.setdefault((r.seed, r.model, r.environment.get("state"), r.defense, r.attack), r)
    return [
        (
            f"seed {where[0]} / " + " / ".join(str(w) for w in where[1:]) + f" (batch {_batch(r)})",
            _cell(row.get("truth", "")),
            _cell(row.get("reconstructed", "")),
        )
        for where, r in smallest.items()
        for row in r.victims[:EXAMPLES]
    ]


def build_text_report(run_dir: str | Path) -> TextReportFiles:
    """Write ``report.md`` and ``report.html`` of a text run from its stored cells."""
    out = Path(run_dir)
    if not (out / STORE_FILE).is_file():
        raise RunDirectoryError(f"{out}: no {STORE_FILE}; run the grid first")
    records = ResultStore(out / STORE_FILE).records()
    stored = json.loads((out / CONFIG_FILE).read_text())
    name, config = stored.get("name", out.name), stored.get("config", {})
    intro = (
        f"# {name}: what the text updates leak\n\nROUGE F-measures after pairing sequences (Hungarian on "
        "ROUGE-1); *guess R-1*: the public split's most frequent words at each text's true length. "
        "The bag of words is scored per victim batch on its distinct tokens (it has no order: no ROUGE-2); "
        "*bag recall*: the share of the batch's distinct tokens it holds; *refused*: the share of victims "
        "whose client guard refused the model sent (they share nothing; the guess is scored for them).\n"
    )
    examples = _examples(records, config)
    md = [intro, markdown_table(records, config), "\n## Examples\n"]
    md += [f"- **{cell}**\n  - true: {truth}\n  - reconstructed: {rec}" for cell, truth, rec in examples]
    markdown = out / "report.md"
    atomic_write_bytes(markdown, ("\n".join(md) + "\n").encode())
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>"
        for row in table_rows(records, config)
    )
    shown = "".join(
        f"<tr><td>{html.escape(c)}</td><td>{html.escape(t)}</td><td>{html.escape(r)}</td></tr>"
        for c, t, r in examples
    )
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(name)}</title><style>"
        "body{font-family:sans-serif;margin:2em;max-width:80em}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}th{background:#eee}</style></head>"
        f"<body><h1>{html.escape(name)}: what the text updates leak</h1>"
        f"<p>{html.escape(intro.split(chr(10), 2)[-1].strip()).replace('*', '')}</p>"
        f"<table><tr>{head}</tr>{body}</table><h2>Examples</h2>"
        f"<table><tr><th>cell</th><th>true</th><th>reconstructed</th></tr>{shown}</table></body></html>"
    )
    page_path = out / "report.html"
    atomic_write_bytes(page_path, page.encode())
    return TextReportFiles(markdown, page_path)
