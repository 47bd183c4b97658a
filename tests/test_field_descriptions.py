"""Each parameter's description, from one source for `leakshield list -v`, errors and the manual: a
pydantic field description, else its model's docstring in the ``name: what it does`` convention."""

from __future__ import annotations

import pydantic
import pytest

from leakshield.errors import ConfigError
from leakshield.registry import Entry, Params, field_descriptions


class Base(Params):
    """a: the first one; shared with the child. z_steps, z_lr: two at once."""

    a: int = 1
    z_steps: int = 1
    z_lr: float = 0.1


class Child(Base):
    """b: a positive number (the paper's 3). c with d: a pair; ``e``: quoted. a: the child's own words."""

    b: float = pydantic.Field(default=3.0, gt=0)
    c: int = 0
    d: int = 0
    e: str = "x"
    f: int = pydantic.Field(default=0, description="from the field itself")
    g: int = 0


def test_the_docstring_convention_and_field_descriptions():
    described = field_descriptions(Child)
    assert described["a"] == "the child's own words."  # the subclass's docstring comes first
    assert described["b"] == "a positive number (the paper's 3)."
    assert described["c"] == described["d"] == "(c, d) a pair."
    assert described["e"] == "quoted."
    assert described["f"] == "from the field itself"
    assert described["z_steps"] == described["z_lr"] == "(z_steps, z_lr) two at once."
    assert described["g"] == ""  # nothing says what g is


def test_an_error_says_what_the_bad_field_is():
    entry = Entry("thing", lambda **_: None, "a thing", params=Child)
    with pytest.raises(ConfigError) as error:
        entry.validate({"b": -1, "unknown": 1})
    text = str(error.value)
    assert "b: Input should be greater than 0 (b: a positive number (the paper's 3))" in text
    assert "unknown: unknown field" in text and text.count("\n") == 0


def test_every_registered_parameter_is_described():
    """All 781 parameters of the registered attacks, defenses, models, datasets and aggregators say what
    they are (a new component's undescribed field fails here, naming it)."""
    from leakshield.attacks import ATTACKS
    from leakshield.data import DATASETS
    from leakshield.defenses import DEFENSES
    from leakshield.fl import AGGREGATORS
    from leakshield.models import MODELS

    entries = {
        e.params: e.name for registry in (ATTACKS, DEFENSES, MODELS, DATASETS, AGGREGATORS) for e in registry
    }
    texts = {
        (name, field): text
        for params, name in entries.items()
        for field, text in field_descriptions(params).items()
    }
    assert len(texts) > 700
    assert [key for key, text in texts.items() if not text] == []
