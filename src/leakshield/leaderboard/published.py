"""The README's published Results against the code that reads them: which rows the installed code
would compute differently (stale, and marked so in the block), and whether every line of the block is
what its export renders — an edited number, a missing mark or an outdated layout is reported.

``leakshield leaderboard --check README.md`` prints :func:`check`'s verdict; ``--from-export`` rewrites
the block with :func:`rerender` (seconds, no cell is run)."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leakshield.code_graph import CodeGraph
from leakshield.errors import LeakshieldError
from leakshield.experiment.config import ExperimentConfig
from leakshield.experiment.store import atomic_write_bytes
from leakshield.leaderboard.export import (
    PAGE_HEAD,
    STAGE_TWO_PREFIX,
    readme_section,
    records_from_json,
    results_page,
    results_page_of,
    results_tables,
    scenarios_from_json,
    stale_rows,
    text_from_json,
)
from leakshield.leaderboard.export_schema import REGENERATE, read_export
from leakshield.leaderboard.readme_markers import (
    marker_span,
    read_readme,
    readme_block,
    replace_readme_section,
)
from leakshield.leaderboard.staleness import TEXT_SCOPE, Staleness, grid_of, judge, provenance_table
from leakshield.leaderboard.tables import Table
from leakshield.leaderboard.text_section import text_tables

SOURCE = re.compile(r"Generated from `([^`]+)`")
#: differing lines a verdict quotes before it counts the rest
SHOWN = 3


@dataclass(frozen=True)
class Verdict:
    """``faithful``: the block is exactly what its export renders with the installed code (numbers,
    stale marks and layout); ``staleness``: the export's stale cells; ``lines``: what to print."""

    faithful: bool
    staleness: Staleness
    lines: list[str]

    @property
    def fresh(self) -> bool:
        return self.faithful and not self.staleness.stale


@dataclass(frozen=True)
class Protocol:
    """Where the grids an export is judged against come from: the leaderboard file (None: the shipped
    one) and the CIFAR-10 folder, as ``leakshield leaderboard`` takes them."""

    path: Path | None = None
    data_root: Path | None = None

    def flags(self) -> str:
        """The command-line options that give this protocol (`` --config FILE --data-root DIR``)."""
        given = [("--config", self.path), ("--data-root", self.data_root)]
        return "".join(f" {flag} {value}" for flag, value in given if value is not None)

    def configs(self, preset: str) -> tuple[ExperimentConfig, dict[str, ExperimentConfig]]:
        """The main grid and the scenarios of ``preset``, as the installed code reads them."""
        from leakshield.leaderboard.presets import load_leaderboard, load_scenarios

        where = {"path": self.path, "data_root": self.data_root}
        main = self._read(preset, "", lambda: load_leaderboard(preset, **where))
        return main, {name: config for name, config, _ in load_scenarios(preset, **where)}

    def text(self, preset: str) -> Any:
        """The text section's grid of ``preset`` as the installed code reads it (None: it has none)."""
        from leakshield.leaderboard.presets import load_text_leaderboard

        return self._read(preset, " (text)", lambda: load_text_leaderboard(preset, path=self.path))

    def _read(self, preset: str, what: str, load: Callable[[], Any]) -> Any:
        """``load()``, a failure said in one line naming the file and the option that gives another."""
        try:
            return load()
        except LeakshieldError as exc:
            file = "the shipped leaderboard file" if self.path is None else str(self.path)
            raise LeakshieldError(
                f"the export's preset {preset!r}{what} cannot be read from {file} ({exc}); give the "
                "leaderboard file it was run with: --config FILE"
            ) from None


def judge_export(text: str, graph: CodeGraph | None = None, protocol: Protocol | None = None) -> Staleness:
    """The stale cells of an export against the preset it names (in ``protocol``'s leaderboard file,
    default the shipped one) and the installed code (or ``graph``), text cells included."""
    facts, records = records_from_json(text)
    protocol = protocol or Protocol()
    main, scenarios = protocol.configs(str(facts["preset"]))
    table = json.loads(text).get("provenance") or {}
    groups = [(None, main, records)]
    groups += [(s.name, scenarios.get(s.name), s.records) for s in scenarios_from_json(text)
               if not s.name.startswith(STAGE_TWO_PREFIX)]  # fmt: skip
    groups += stage_two_groups(text, main, scenarios)
    text_cells = text_from_json(text)
    if text_cells is not None:
        groups.append((TEXT_SCOPE, protocol.text(str(facts["preset"])), text_cells[0]))
    return judge(groups, table, graph)


def stage_two_groups(
    text: str, main: ExperimentConfig, scenarios: dict[str, ExperimentConfig]
) -> list[tuple[str, ExperimentConfig | None, list[Any]]]:
    """The export's stage-2 reruns as judged groups: each with the config the installed code gives it
    (None, stale whole, where its source grid or its cell is no longer in the preset)."""
    from leakshield.leaderboard.rerun import Rerun
    from leakshield.leaderboard.stage_two import rerun_config

    groups = []
    found = [s for s in scenarios_from_json(text) if s.name.startswith(STAGE_TWO_PREFIX)]
    for entry, group in zip(json.loads(text).get("stage2", []), found, strict=True):
        rerun = Rerun.from_json(entry["rerun"])
        source = main if rerun.source is None else scenarios.get(rerun.source)
        try:
            config = None if source is None else rerun_config(source, rerun)
        except LeakshieldError:
            config = None
        groups.append((group.name, config, group.records))
    return groups


def export_of(readme: Path) -> tuple[str, Path]:
    """The README's block and the export it says it was generated from."""
    if readme.is_dir():
        raise LeakshieldError(f"{readme}: a folder, not a README")
    if not readme.is_file():
        raise LeakshieldError(f"{readme}: no such file")
    block = readme_block(read_readme(readme), readme)
    if block is None:
        raise LeakshieldError(f"{readme}: no generated Results block (run the leaderboard with --readme)")
    found = SOURCE.search(block)
    if found is None:
        raise LeakshieldError(f"{readme}: the Results block names no export ('Generated from `…`')")
    export = readme.parent / found.group(1)
    if export.is_dir():
        raise LeakshieldError(f"{readme}: the Results block cites {found.group(1)}, which is a folder")
    if not export.is_file():
        raise LeakshieldError(f"{readme}: the Results block cites {found.group(1)}, which does not exist")
    return block, export


@dataclass(frozen=True)
class Rendered:
    """What an export renders with the installed code: the README's block, the results page (every
    table), the export's staleness, its run facts and its tables (stale rows marked)."""

    block: str
    page: str
    staleness: Staleness
    facts: dict[str, Any]
    tables: list[Table]


def render(
    export: Path, source: str, graph: CodeGraph | None = None, protocol: Protocol | None = None
) -> Rendered:
    """The block and the results page ``export`` renders with the installed code, stale rows marked; a
    damaged export is refused (:func:`~leakshield.leaderboard.export_schema.read_export`)."""
    text = read_export(export, "")
    try:
        facts, records = records_from_json(text)
        staleness = judge_export(text, graph, protocol)
        scenarios = scenarios_from_json(text)
        tables = results_tables(records, scenarios, staleness)
        text_cells = text_from_json(text)
        stale = {key for scope, key in staleness.stale if scope == TEXT_SCOPE}
        text_found = text_tables(*text_cells, stale) if text_cells is not None else []
        page = [*tables, *text_found]
        return Rendered(
            readme_section(facts, records, source, scenarios, staleness, tables, text_found),
            results_page(facts, records, source, scenarios, staleness, page),
            staleness,
            facts,
            [*tables, *text_found],
        )
    except LeakshieldError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError) as exc:
        # what the schema cannot see (a cell the tables need, missing from a digest-valid export)
        why = f"{type(exc).__name__}: {' '.join(str(exc).split())[:120]}"
        raise LeakshieldError(f"{export}: its cells cannot be rendered ({why}); {REGENERATE}") from None


def check(readme: Path, graph: CodeGraph | None = None, protocol: Protocol | None = None) -> Verdict:
    """Compare the README's block with what its export renders, and say which rows are stale."""
    block, export = export_of(readme)
    source = export.relative_to(readme.parent).as_posix()
    rendered = render(export, source, graph, protocol)
    staleness = rendered.staleness
    page = readme.parent / results_page_of(source)
    written = page.read_text() if page.is_file() else None
    lines = []
    faithful = block == rendered.block and written == rendered.page
    redo = f"(rerender them: leakshield leaderboard --from-export {source} --readme {readme})"
    if block != rendered.block:
        lines.append(
            f"differs: the Results block of {readme} is not what {source} renders with this code {redo}"
        )
        lines += _differences(block, rendered.block)
    if written is None:
        what = "is a folder" if page.is_dir() else "is missing"
        lines.append(f"differs: the results page {page} {what} {redo}")
    elif written != rendered.page:
        lines.append(f"differs: the results page {page} is not what {source} renders with this code {redo}")
        lines += _differences(written, rendered.page, "page")
    facts = rendered.facts
    marked, rows = stale_rows(rendered.tables)
    if staleness.stale:
        lines.append(f"stale: {marked} of {rows} rows ({len(staleness.stale)} of {staleness.cells} cells) "
                     "were computed by other code or settings than this code's:")  # fmt: skip
        lines += [f"  {reason}" for reason in staleness.changes]
        where = "" if protocol is None else protocol.flags()
        lines.append(
            f"  recompute them: leakshield leaderboard --preset {facts['preset']}{where} --readme {readme}"
        )
    else:
        lines.append(f"{'fresh' if faithful else 'the export is fresh'}: every one of its {staleness.cells} "
                     "cells was computed by this code's components and settings")  # fmt: skip
    return Verdict(faithful, staleness, lines)


def _differences(block: str, expected: str, where: str = "block") -> list[str]:
    """The first differing lines of the README's block (or the results page) against what the export
    renders (``line 12 of the block: README has … , the export renders …``)."""
    ours, theirs = block.splitlines(), expected.splitlines()
    out = []
    matcher = difflib.SequenceMatcher(a=ours, b=theirs, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        for k in range(max(i2 - i1, j2 - j1)):
            mine = ours[i1 + k] if i1 + k < i2 else None
            given = theirs[j1 + k] if j1 + k < j2 else None
            shown_mine, shown_given = _around_difference(mine, given)
            out.append(f"  line {min(i1 + k, len(ours) - 1) + 1} of the {where}: "
                       f"{'README' if where == 'block' else 'it'} has {shown_mine}, "
                       f"the export renders {shown_given}")  # fmt: skip
    return out[:SHOWN] + ([f"  … and {len(out) - SHOWN} more"] if len(out) > SHOWN else [])


def _around_difference(
    mine: str | None, given: str | None, before: int = 50, width: int = 110
) -> tuple[str, str]:
    """Both lines quoted from a little before their first differing character (long table rows);
    ``nothing`` for a line one side lacks."""
    a, b = mine or "", given or ""
    first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    start = max(0, first - before)

    def cut(line: str | None) -> str:
        if line is None:
            return "nothing"
        part = line[start : start + width]
        return repr(("…" if start else "") + part + ("…" if start + width < len(line) else ""))

    return cut(mine), cut(given)


def rerender(
    readme: Path, export: Path, graph: CodeGraph | None = None, protocol: Protocol | None = None
) -> Staleness:
    """Rewrite the README's block and the results page beside ``export`` from it (stale rows marked);
    its staleness."""
    try:
        source = export.resolve().relative_to(readme.resolve().parent).as_posix()
    except ValueError:
        raise LeakshieldError(
            f"--from-export {export}: the export must lie in the README's folder tree "
            f"({readme.resolve().parent}), which the block cites it from"
        ) from None
    marker_span(read_readme(readme), readme)  # broken markers: refused before anything is written
    rendered = render(export, source, graph, protocol)
    page = readme.parent / results_page_of(source)
    if page.is_dir():
        raise LeakshieldError(f"{page} is a folder; the results page is written there as a file")
    if page.is_file() and not page.read_text(errors="replace").startswith(PAGE_HEAD):
        raise LeakshieldError(
            f"{page} exists and was not written by leakshield (its first line is not "
            f"{PAGE_HEAD!r}); move it: the export's results page is written there"
        )
    atomic_write_bytes(page, rendered.page.encode())
    replace_readme_section(readme, rendered.block)
    return rendered.staleness


def stamp_export(
    data: dict[str, Any],
    main: ExperimentConfig,
    scenarios: dict[str, ExperimentConfig],
    graph: CodeGraph | None = None,
    text: Any = None,
) -> dict[str, Any]:
    """An export (as parsed JSON) with every cell stamped as ``graph`` (default: the installed code)
    computes it under ``main``, the ``scenarios``' configs and the ``text`` section's grid (where the
    export has one), and its provenance table: what stamping an export computed by that code means (the
    one-off migration of the published export does it with the graph of the commit that computed it)."""
    groups = [(main, data["cells"])] + [(scenarios[s["name"]], s["cells"]) for s in data["scenarios"]]
    reruns = [
        (found, entry["cells"])
        for entry, (_, found, _) in zip(
            data.get("stage2", []), stage_two_groups(json.dumps(data), main, scenarios), strict=True
        )
    ]
    groups += [(config, cells) for config, cells in reruns if config is not None]  # fmt: skip
    if text is not None and data.get("text") is not None:
        groups.append((text, data["text"]["cells"]))
    for config, cells in groups:
        stamper, by_key = grid_of(config, graph)
        for cell in cells:
            cell["environment"]["components"] = stamper.stamps(by_key[cell["key"]])
    dumped = json.dumps(data)
    _, records = records_from_json(dumped)
    found = [(scenarios[s.name], s.records) for s in scenarios_from_json(dumped)
             if not s.name.startswith(STAGE_TWO_PREFIX)]  # fmt: skip
    found += [(config, cells) for _, config, cells in stage_two_groups(dumped, main, scenarios) if config]
    text_cells = text_from_json(dumped)
    if text is not None and text_cells is not None:
        found.append((text, text_cells[0]))
    return {**data, "provenance": provenance_table([(main, records), *found], graph)}
