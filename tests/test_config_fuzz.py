"""A property-based fuzz of the config layer every command reads through: generated configs (the tiny
config with one or more fields replaced by arbitrary values, unknown fields added, whole sections
swapped for junk) either load — and then expand into a grid and fingerprint — or fail with one
:class:`~leakshield.errors.LeakshieldError` naming the field; never another exception, never a hang.
The default run draws 300 configs (seconds); ``pytest -m slow`` draws 20,000."""

from __future__ import annotations

import copy
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leakshield.errors import LeakshieldError
from leakshield.experiment.cells import expand_grid
from leakshield.experiment.config import parse_config

from helpers import TINY, watchdog

PATHS = [
    ("name",), ("seeds",), ("seeds", 0), ("dataset",), ("dataset", "name"), ("dataset", "channels"),
    ("dataset", "size"), ("dataset", "public_fraction"), ("models",), ("models", 0), ("fl",),
    ("fl", "clients"),
    ("fl", "clients_per_round"), ("fl", "local"), ("fl", "local", "local_lr"), ("fl", "local", "batch_size"),
    ("fl", "local", "optimizer"), ("fl", "local", "momentum"), ("fl", "partition"), ("fl", "aggregator"),
    ("fl", "defended_clients"), ("attack",), ("attack", "rounds"), ("attack", "update"),
    ("attack", "threat"), ("victims",), ("victims", "count"), ("victims", "batch_size"), ("defenses",),
    ("defenses", 0), ("attacks",), ("attacks", 0), ("attacks", 0, "iterations"), ("attacks", 0, "name"),
    ("attacks", 0, "path"), ("attacks", 0, "lr"), ("utility",), ("utility", "rounds"), ("metrics",),
    ("metrics", "asr_threshold"), ("report",), ("execution",), ("execution", "victim_shards"), ("unknown",),
]  # fmt: skip

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**25), max_value=10**25),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(
        ["ig", "none", "lenet", "dp-sgd", "imprint", "hitaj", "fedavg", "adam", "..", "/x", "\x00"]
    ),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
MUTATIONS = st.lists(st.tuples(st.sampled_from(PATHS), VALUES), min_size=1, max_size=3)


def mutate(config: dict, path: tuple, value: object) -> dict:
    data = copy.deepcopy(config)
    node = data
    for key in path[:-1]:
        if isinstance(node, dict) and key in node and isinstance(node[key], dict | list):
            node = node[key]
        elif isinstance(node, list) and isinstance(key, int) and key < len(node):
            if not isinstance(node[key], dict):
                node[key] = {"name": node[key]} if isinstance(node[key], str) else {}
            node = node[key]
        else:
            return data
    last = path[-1]
    if isinstance(node, dict) or (isinstance(node, list) and isinstance(last, int) and last < len(node)):
        node[last] = value
    return data


def check(mutations: list[tuple[tuple, object]]) -> str:
    data = TINY
    for path, value in mutations:
        data = mutate(data, path, value)
    try:
        with watchdog():
            config = parse_config(data, source="fuzz")
    except LeakshieldError as exc:
        message = str(exc)
        assert message and "\n" not in message.strip(), message
        outcome = "refused"
    else:
        cells = expand_grid(config)
        assert cells and len(config.fingerprint()) == 16
        assert all(math.isfinite(v) for v in _numbers(config.model_dump()))
        outcome = "loaded"
    return outcome


def _numbers(value: object):
    if isinstance(value, float):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _numbers(v)
    elif isinstance(value, list):
        for v in value:
            yield from _numbers(v)


OUTCOMES: dict[str, int] = {}


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(MUTATIONS)
def test_generated_configs_load_or_are_refused_in_one_line(mutations):
    outcome = check(mutations)
    OUTCOMES[outcome] = OUTCOMES.get(outcome, 0) + 1


@pytest.mark.slow
@settings(max_examples=20_000, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(MUTATIONS)
def test_generated_configs_long_run(mutations):
    check(mutations)
