"""DCS²'s two shared-gradient variants (Wu et al., AAAI 2024, Eq. 10, and the reference code's Eq. 10 / d)
are named in every shipped table, so no number is read as the other variant's; so is `boxed: false`."""

from __future__ import annotations

import yaml

from leakshield.defenses import create_defense

from helpers import CONFIGS


def test_every_shipped_dcs2_row_names_its_eq10_variant():
    rows = []
    for path in sorted(CONFIGS.glob("dcs2*.yaml")):
        rows += [
            d
            for d in yaml.safe_load(path.read_text())["defenses"]
            if isinstance(d, dict) and d["name"] == "dcs2"
        ]
    assert rows
    for row in rows:
        divided = row.get("normalization", "paper") == "reference"
        unboxed = "-unboxed" if row.get("boxed", True) is False else ""  # samples outside the pixel range
        assert row["label"] == ("DCS2-eq10-div-d" if divided else "DCS2-eq10") + unboxed
    assert create_defense("dcs2", {}).params.normalization == "paper"  # the default is Eq. 10 as written
