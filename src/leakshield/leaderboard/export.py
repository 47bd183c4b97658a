"""The leaderboard's portable outputs: a JSON export of a run (its cells' coordinates and numbers, the
run's date, machine and version) from which the ranked table is recomputed, and the Markdown of that
table for the README's Results section (generated, never typed)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from leakshield.experiment.store import CellRecord
from leakshield.leaderboard.budget_tables import TITLE as BUDGET_TITLE
from leakshield.leaderboard.budget_tables import budget_tables
from leakshield.leaderboard.export_schema import TEXT_METRICS as TEXTS
from leakshield.leaderboard.export_schema import numbers_digest
from leakshield.leaderboard.front_door import compact_results
from leakshield.leaderboard.power import power_sentence
from leakshield.leaderboard.ranking import threats
from leakshield.leaderboard.readme_markers import (  # noqa: F401 (0.2's import path of the markers)
    README_END,
    README_START,
    readme_block,
    replace_readme_section,
)
from leakshield.leaderboard.rerun import stage_two_name
from leakshield.leaderboard.staleness import Staleness, stale_labels
from leakshield.leaderboard.tables import (
    STALE_MARK,
    Table,
    markdown,
    marked_stale,
    realism_table,
    threat_tables,
)


@dataclass(frozen=True)
class Scenario:
    """A realism scenario's cells: ``ranked`` ones join the per-threat rankings."""

    name: str
    title: str
    ranked: bool
    records: list[CellRecord]


def run_facts(records: Sequence[CellRecord], name: str, preset: str, fingerprint: str) -> dict[str, Any]:
    """When, where and with what the run's cells were computed (from the records themselves)."""
    env = next((r.environment for r in records if r.environment), {})
    finished = max((r.finished for r in records), default=0.0)
    sources = sorted({str(r.environment.get("source")) for r in records if r.environment})
    return {
        "source": sources[0] if len(sources) == 1 else None,
        "sources": sources,
        "name": name,
        "preset": preset,
        "fingerprint": fingerprint,
        "finished": datetime.datetime.fromtimestamp(finished, datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "leakshield": env.get("leakshield"),
        "torch": env.get("torch"),
        "device": env.get("device"),
        "threads": env.get("threads"),
        "machine": f"{platform.machine()} with {os.cpu_count()} cores; cells on {env.get('device', '?')}, "
        f"{env.get('threads', '?')} torch thread(s) each",
        "cells": len(records),
        "cell_seconds": round(sum(r.seconds for r in records), 1),
    }


def _cell_json(r: CellRecord) -> dict[str, Any]:
    return {
        "key": r.key, "kind": r.kind, "model": r.model, "defense": r.defense, "attack": r.attack,
        "round": r.round, "seed": r.seed, "status": r.status, "error": r.error,
        "seconds": round(r.seconds, 2), "finished": round(r.finished, 1),
        "metrics": {k: v for k, v in r.metrics.items() if _kept(k, v)},
        "attack_name": r.attack_name, "threat": r.threat, **({"scale": r.scale} if r.scale else {}),
        **({"stage": r.stage} if r.stage != 1 else {}),
        **({"environment": r.environment} if r.environment else {}),
        **({"victims": _victim_scores(r)} if r.kind in ("attack", "baseline") and r.victims else {}),
        **({"victims": _sequence_scores(r)} if r.kind == "text" and r.victims else {}),
    }  # fmt: skip


def _kept(name: str, value: Any) -> bool:
    return isinstance(value, int | float) or value is None or name in TEXTS


#: the per-victim scores an export keeps (what leaks are counted from; a guard's refusal for 'SSIM if
#: missed')
VICTIM_KEYS = ("ssim", "prior_ssim", "class", "class_ssim", "refused")


def _victim_scores(r: CellRecord) -> list[dict[str, Any]]:
    """Each victim's per-image SSIMs (and its prior draw's, its class-level score, its refusal)."""
    return [{k: v[k] for k in VICTIM_KEYS if v.get(k) is not None} for v in r.victims]


#: the per-sequence scores an export keeps of a text cell (what the text rankings count leaks from)
SEQUENCE_KEYS = ("victim", "sequence", "rouge1", "rouge2", "floor_rouge2", "refused")


def _sequence_scores(r: CellRecord) -> list[dict[str, Any]]:
    return [{k: v[k] for k in SEQUENCE_KEYS if v.get(k) is not None} for v in r.victims]


def export_json(
    records: Sequence[CellRecord],
    facts: dict[str, Any],
    scenarios: Sequence[Scenario] = (),
    provenance: dict[str, Any] | None = None,
    text: tuple[Sequence[CellRecord], int] | None = None,
    stage_two: Sequence[tuple[dict[str, Any], Sequence[CellRecord]]] = (),
) -> str:
    """The run as JSON: ``facts``, every cell without its images (each victim's scores kept: its SSIMs,
    its prior draw's, a guard's refusal; its environment keeps its components' stamps), each realism
    scenario's description and cells, ``provenance``: stamp → the component's modules and settings
    (:func:`leakshield.leaderboard.staleness.provenance_table`), and ``text``: the text section's cells
    (each sequence's scores kept) and its trained state's rounds; ``stage2``: each stage-2 rerun
    (:mod:`.stage_two`: its coordinates as JSON) and its cells; ``digest``: the digest of every cell's
    numbers (:func:`~.export_schema.numbers_digest`), which reading the export checks."""
    data = {
        "run": facts,
        "cells": [_cell_json(r) for r in records],
        "scenarios": [{"name": s.name, "title": s.title, "ranked": s.ranked,
                       "cells": [_cell_json(r) for r in s.records]} for s in scenarios],
    }  # fmt: skip
    if provenance is not None:
        data["provenance"] = provenance
    if text is not None:
        data["text"] = {"rounds": text[1], "cells": [_cell_json(r) for r in text[0]]}
    if stage_two:
        data["stage2"] = [{"rerun": rerun, "cells": [_cell_json(r) for r in cells]}
                          for rerun, cells in stage_two]  # fmt: skip
    data["digest"] = numbers_digest(json.loads(json.dumps(data)))  # the numbers as a reader parses them
    return json.dumps(data, indent=0, sort_keys=True)


def text_from_json(text: str) -> tuple[list[CellRecord], int] | None:
    """The export's text section (cells, trained rounds); None for an export without one."""
    found = json.loads(text).get("text")
    return None if found is None else ([_record(c) for c in found["cells"]], int(found["rounds"]))


def provenance_from_json(text: str) -> dict[str, Any]:
    """The export's stamp → component table (empty for an export made before stamps)."""
    return json.loads(text).get("provenance") or {}


def _record(c: dict[str, Any]) -> CellRecord:
    return CellRecord(
        key=c["key"], kind=c["kind"], model=c["model"], defense=c["defense"], attack=c["attack"],
        round=c["round"], seed=c["seed"], status=c["status"], metrics=c["metrics"],
        victims=c.get("victims", []), error=c["error"], images=None, seconds=c["seconds"],
        finished=c["finished"],
        attack_name=c.get("attack_name"), threat=c.get("threat"), scale=c.get("scale"),
        environment=c.get("environment") or {}, stage=int(c.get("stage", 1)),
    )  # fmt: skip


def records_from_json(text: str) -> tuple[dict[str, Any], list[CellRecord]]:
    data = json.loads(text)
    return data["run"], [_record(c) for c in data["cells"]]


#: the name prefix of a stage-2 rerun among the groups :func:`scenarios_from_json` returns
STAGE_TWO_PREFIX = "stage2/"


def scenarios_from_json(text: str) -> list[Scenario]:
    """The export's scenarios, then its stage-2 reruns as ranked groups named ``stage2/<rerun>``."""
    data = json.loads(text)
    found = [Scenario(s["name"], s["title"], s["ranked"], [_record(c) for c in s["cells"]])
             for s in data.get("scenarios", [])]  # fmt: skip
    for entry in data.get("stage2", []):
        records = [dataclasses.replace(_record(c), stage=2) for c in entry["cells"]]
        found.append(Scenario(STAGE_TWO_PREFIX + stage_two_name(entry["rerun"]), "stage 2", True, records))
    return found


def baseline_ssim(records: Sequence[CellRecord]) -> float | None:
    values = [
        r.metrics.get("ssim") for r in records if r.kind == "baseline" and r.status == "ok" and not r.scale
    ]
    values = [float(v) for v in values if isinstance(v, int | float)]
    return sum(values) / len(values) if values else None


HOW_TO_READ = (
    "A victim's margin is how far its reconstruction's SSIM rises above that victim's own no-information "
    "score (the public mean image's SSIM against it, {baseline} on average, or for a generative-prior "
    "attack (GGL) its prior's own draw for the label), 0 at or below it; it leaks when the margin is "
    "positive and the SSIM at least 0.6. A defense's privacy against an adversary is measured under the "
    "strongest attack that adversary ran: chosen among its attack × round cells on every seed (stage 1) "
    "and, where stage 2 ran, rerun on fresh victims per seed, whose numbers are shown. Each row's mean "
    "margin is compared with no defense's by a one-sided paired t-test over seeds, Holm-corrected over "
    "the table (* : shown to leak less), with the difference's simultaneous interval; rows sharing a "
    "letter were not shown different by all-pairs tests. Intervals treat seeds, not victims, as the unit. "
    "Accuracy: test accuracy after {rounds} FedAvg rounds under the defense, trained with its paper's "
    "optimizer at the learning rate tuned on the public split; a defense below chance + ½ (undefended − "
    "chance) does not train at this budget and is not compared; a client guard refusing more than half "
    "of honest models neither; ● marks the privacy–utility Pareto front. "
    "{power}"
)


def results_tables(
    records: Sequence[CellRecord], scenarios: Sequence[Scenario] = (), staleness: Staleness | None = None
) -> list[Table]:
    """Every table of the results: the rankings per threat model, then one per realism scenario; with
    ``staleness``, the label of each row a stale cell feeds ends in :data:`STALE_MARK`."""
    ranked = [r for s in scenarios if s.ranked for r in s.records]
    tables = threat_tables(records, ranked)
    if staleness is not None and staleness.stale:  # one table per threat, in threat_tables' order
        fed = [(None, r) for r in records]
        fed += [(s.name, r) for s in scenarios if s.ranked for r in s.records if r.kind == "attack"]
        order = threats([r for _, r in fed])
        tables = [
            marked_stale(t, stale_labels(fed, staleness.stale, threat))
            for t, threat in zip(tables, order, strict=True)
        ]
    for threat, table in budget_tables(records, ranked):
        if staleness is not None and staleness.stale:
            table = marked_stale(table, stale_labels(fed, staleness.stale, threat))
        tables.append(table)
    for s in scenarios:
        if not s.ranked:
            table = realism_table(f"Realism: {s.title}", s.records)
            if staleness is not None and staleness.stale:
                table = marked_stale(table, stale_labels([(s.name, r) for r in s.records], staleness.stale))
            tables.append(table)
    return tables


def stale_rows(tables: Sequence[Table]) -> tuple[int, int]:
    """(rows marked stale, rows) over ``tables`` (the accuracy-budget tables repeat rows of the rankings:
    not counted again)."""
    rows = [row for t in tables if not t.title.startswith(BUDGET_TITLE) for row in t.rows]
    return sum(any(c.endswith(STALE_MARK) for c in row) for row in rows), len(rows)


def reading_note(records: Sequence[CellRecord]) -> str:
    """How to read the tables, with the run's baseline and utility rounds."""
    rounds = next((r.round for r in records if r.kind == "utility"), None)
    baseline = baseline_ssim(records)
    scored = [r for r in records if r.kind == "baseline" and r.status == "ok" and r.victims and not r.scale]
    seeds = len({r.seed for r in records if r.kind == "attack" and r.status == "ok"})
    victims = sum(len(v.get("ssim") or []) for v in scored[0].victims) if scored else 0
    power = power_sentence(seeds, victims) if victims and seeds else (
        "This export predates per-victim scores: each cell's images count at the cell's mean SSIM "
        "(\"cell means\").")  # fmt: skip
    return HOW_TO_READ.format(
        baseline="—" if baseline is None else f"{baseline:.3f}", rounds=rounds or "—", power=power
    )


def results_markdown(
    records: Sequence[CellRecord],
    scenarios: Sequence[Scenario] = (),
    staleness: Staleness | None = None,
    tables: Sequence[Table] | None = None,
) -> str:
    """The tables in Markdown with the reading note (and, with ``staleness``, what is stale); ``tables``:
    :func:`results_tables` of the same arguments, when already built."""
    tables = results_tables(records, scenarios, staleness) if tables is None else tables
    note = reading_note(records)
    if staleness is not None and staleness.stale:
        note = stale_note(tables, staleness) + "\n\n" + note
    return note + "\n\n" + "\n".join(markdown(t) for t in tables)


#: how many reasons the stale note lists before it counts the rest
REASONS_SHOWN = 6


def stale_note(tables: Sequence[Table], staleness: Staleness) -> str:
    """The line above the tables that says how many rows are stale, since which changes, and how to
    recompute them."""
    marked, rows = stale_rows(tables)
    reasons = staleness.changes
    shown = "; ".join(reasons[:REASONS_SHOWN]) + (
        f"; and {len(reasons) - REASONS_SHOWN} more" if len(reasons) > REASONS_SHOWN else ""
    )
    return (
        f"**Stale: {marked} of {rows} rows** (marked “{STALE_MARK.strip()}”; {len(staleness.stale)} of "
        f"{staleness.cells} cells) were computed before changes to their components — {shown}. "
        "Ranks and the front may move when they are recomputed: rerun the leaderboard with `--readme` "
        "(it recomputes the stale cells of its run directory)."
    )


def _generated_from(
    facts: dict[str, Any], records: Sequence[CellRecord], source: str, scenarios: Sequence[Scenario]
) -> str:
    cells = len(records) + sum(len(s.records) for s in scenarios)
    failed = sum(r.status != "ok" for r in records) + sum(
        r.status != "ok" for s in scenarios for r in s.records
    )
    return (
        f"Generated from `{source}` (preset `{facts['preset']}`, run `{facts['name']}`, config fingerprint "
        f"`{facts['fingerprint']}`, {source_line(facts)}), finished {facts['finished']} with leakshield "
        f"{facts['leakshield']} and torch {facts['torch']} on {facts['machine']}; {cells} cells "
        f"({failed} failed){_wall(facts)}. Check it against your code: `leakshield leaderboard --check "
        f"README.md`."
    )


def results_page_of(export: str) -> str:
    """Where the results page of an export lies: beside it, ``<preset>.md``."""
    return export.removesuffix(".json") + ".md"


def readme_section(
    facts: dict[str, Any],
    records: Sequence[CellRecord],
    source: str,
    scenarios: Sequence[Scenario] = (),
    staleness: Staleness | None = None,
    tables: Sequence[Table] | None = None,
    text: Sequence[Table] = (),
) -> str:
    """The README's Results section for the run exported at ``source``: its compact tables
    (:mod:`~leakshield.leaderboard.front_door`; with ``staleness``, the stale rows marked and counted),
    every table being on the results page (:func:`results_page`); ``tables``: as for
    :func:`results_markdown`; ``text``: the text section's tables, compacted after the images'."""
    tables = results_tables(records, scenarios, staleness) if tables is None else tables
    stale = (
        stale_note([*tables, *text], staleness) + "\n\n" if staleness is not None and staleness.stale else ""
    )
    compact = compact_results(tables, baseline_ssim(records), results_page_of(source), text)
    head = _generated_from(facts, records, source, scenarios)
    return f"{README_START}\n{head}\n\n{stale}{compact}{README_END}"


PAGE_HEAD = "<!-- generated by `leakshield leaderboard --readme` (or --from-export); do not edit -->"


def results_page(
    facts: dict[str, Any],
    records: Sequence[CellRecord],
    source: str,
    scenarios: Sequence[Scenario] = (),
    staleness: Staleness | None = None,
    tables: Sequence[Table] | None = None,
) -> str:
    """The results page of the run exported at ``source``: how to read the tables and every table, stale
    rows marked (the docs' leaderboard page includes it); ``tables``: as for :func:`results_markdown`."""
    return (
        f"{PAGE_HEAD}\n{_generated_from(facts, records, source, scenarios)}\n\n"
        f"{results_markdown(records, scenarios, staleness, tables)}"
    )


def _wall(facts: dict[str, Any]) -> str:
    wall = facts.get("wall_minutes")
    return "" if wall is None else f", {wall:.0f} min of wall time with {facts.get('workers', '?')} workers"


def source_line(facts: dict[str, Any]) -> str:
    """The block's provenance phrase: the source-tree hash of the code that computed every cell."""
    if facts.get("source") and facts["source"] != "None":
        return f"source tree `{facts['source']}`"
    return "source tree `mixed`" if len(facts.get("sources") or []) > 1 else "source tree `unknown`"
