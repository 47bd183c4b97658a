"""The mutant catalogue stays true to the source (the mutant check itself, `python benchmarks/mutants.py`,
runs each mutant's tests against a mutated copy of the package; minutes, so outside the default suite)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from leakshield.attacks import ATTACKS
from leakshield.data import DATASETS
from leakshield.defenses import DEFENSES
from leakshield.fl import AGGREGATORS
from leakshield.metrics import METRICS
from leakshield.text_grid.attacks import TEXT_ATTACKS

from mutant_catalogue import MUTANTS, uncovered

ROOT = Path(__file__).resolve().parents[1]
REGISTERED = {
    "attack": set(ATTACKS.names()),
    "defense": set(DEFENSES.names()),
    "metric": set(METRICS.names()),
    "aggregator": set(AGGREGATORS.names()),
    "dataset": set(DATASETS.names()),
    "text-attack": set(TEXT_ATTACKS.names()),
    "audit": {"dp-audit", "percentile-filter", "check-dp", "flower-canaries",
              "model-audit", "reproduction-verdicts"},  # modules, not registries
}


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: f"{m.component}:{m.name[:30]}")
def test_each_mutant_names_a_registered_component_text_that_occurs_once_and_real_tests(mutant):
    assert mutant.component in REGISTERED[mutant.kind]
    text = (ROOT / "src" / "leakshield" / mutant.file).read_text()
    assert text.count(mutant.old) == 1, f"{mutant.file}: the text occurs {text.count(mutant.old)} times"
    assert mutant.old != mutant.new and mutant.tests
    for test in mutant.tests:
        file, _, name = test.partition("::")
        name = name.partition("[")[0]  # a parametrized case: its test function
        source = (ROOT / file).read_text()
        assert not name or re.search(rf"^def {re.escape(name)}\(", source, re.M), test


def test_every_registered_attack_defense_metric_and_aggregator_has_a_mutant():
    """A component registered without a catalogued break of its core step fails here (issue: every
    component proves it works); add its mutant to ``tests/mutant_catalogue.py``."""
    assert uncovered() == []
