"""A fuzz of the readers every command's files go through: a leaderboard export (its JSON structure
mutated, its bytes flipped or cut) and a YAML document (arbitrary text) either read or fail with one
:class:`~leakshield.errors.LeakshieldError` line; never another exception, never a traceback from the
command line. The default run draws a few hundred inputs (seconds)."""

from __future__ import annotations

import contextlib
import functools
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leakshield.cli import main
from leakshield.errors import LeakshieldError
from leakshield.experiment.yaml_files import parse_yaml
from leakshield.leaderboard.export_schema import numbers_digest, parse_export

from helpers import watchdog

EXPORT = Path(__file__).resolve().parents[1] / "docs" / "leaderboard" / "standard.json"


@functools.cache
def tiny_export() -> dict:
    """Three cells of the published export (an attack, a utility and a baseline cell) and its digest."""
    data = json.loads(EXPORT.read_text())
    kinds = {}
    for cell in data["cells"]:
        kinds.setdefault(cell["kind"], cell)
    cells = [kinds["attack"], kinds["utility"], kinds["baseline"]]
    small = {"run": {**data["run"], "cells": 3}, "cells": cells, "scenarios": [], "provenance": {}}
    return {**small, "digest": numbers_digest(small)}


SCALARS = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1, 0, "", "0.5", True]),  # the edges, often
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**25), max_value=10**25),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=5,
)


def _paths(node: object, prefix: tuple = ()) -> list[tuple]:
    """Every path into the export (keys and list indices), the root's children first."""
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node[:2]):
            found += _paths(value, (*prefix, i))
    return found


PATHS = _paths(tiny_export())


_DELETE = object()


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(
    mutations=st.lists(
        st.tuples(st.sampled_from(PATHS), st.one_of(VALUES, st.just(_DELETE))), min_size=1, max_size=3
    ),
    redigest=st.booleans(),
)
def test_a_mutated_export_is_read_or_refused_in_one_line(mutations, redigest) -> None:
    text = json.dumps(tiny_export())
    for path, value in mutations:
        try:
            data = json.loads(text)
            node = data
            for key in path[:-1]:
                node = node[key]
            if value is _DELETE:
                del node[path[-1]]
            else:
                node[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed this path
        if redigest and isinstance(data, dict):
            with contextlib.suppress(Exception):  # a structure the digest cannot walk: the schema refuses it
                data["digest"] = numbers_digest(data)
        text = json.dumps(data)
    with watchdog(20):
        try:
            parse_export(text, "fuzzed.json")
        except LeakshieldError as exc:
            assert "\n" not in str(exc) and str(exc).startswith("fuzzed.json")


@settings(max_examples=150, deadline=None, derandomize=True)
@given(flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
       cut=st.one_of(st.none(), st.integers(0, 10**6)))  # fmt: skip
def test_flipped_or_cut_export_bytes_are_read_or_refused_in_one_line(flips, cut) -> None:
    raw = bytearray(json.dumps(tiny_export()).encode())
    for where, byte in flips:
        raw[where % len(raw)] = byte
    if cut is not None:
        raw = raw[: cut % len(raw)]
    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        return  # read_export refuses non-UTF-8 before parsing (the command-line test below)
    try:
        parse_export(text, "fuzzed.json")
    except LeakshieldError as exc:
        assert "\n" not in str(exc)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(text=st.text(max_size=80))
def test_any_yaml_text_is_read_or_refused_in_one_line(text: str) -> None:
    try:
        parse_yaml(text, "fuzzed.yaml")
    except LeakshieldError as exc:
        assert str(exc).startswith("fuzzed.yaml") and "\n" not in str(exc)


@pytest.mark.parametrize("seed", range(3))
def test_the_command_line_never_shows_a_traceback_for_a_damaged_export(
    tmp_path: Path, capsys: pytest.CaptureFixture, seed: int
) -> None:
    import random

    rng = random.Random(seed)
    raw = bytearray(json.dumps(tiny_export()).encode())
    for _ in range(rng.randint(1, 5)):
        raw[rng.randrange(len(raw))] = rng.randrange(256)
    export, readme = tmp_path / "e.json", tmp_path / "README.md"
    export.write_bytes(bytes(raw))
    readme.write_text("# x\n")
    code = main(["leaderboard", "--from-export", str(export), "--readme", str(readme)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if code == 2:  # refused: one line, the README untouched
        assert err.count("\n") == 1 and readme.read_text() == "# x\n"
    else:  # a flip outside the numbers (a stamp's letter): rendered
        assert code == 0 and err == ""


def test_the_tiny_export_itself_is_read() -> None:
    data = parse_export(json.dumps(tiny_export()), "x")
    assert len(data["cells"]) == 3 and not math.isnan(data["cells"][0]["seconds"])
