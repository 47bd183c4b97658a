"""Held-out victims for a text grid (``victims.offset``): tuning an attack on other clients' texts than
the ones a comparison attacks (issue 84: LAMP and TAG tuned on the same held-out victims)."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from test_text_grid import tiny_config

from leakshield.errors import ConfigError
from leakshield.text_grid.config import parse_text_config

for module in ("transformers", "tokenizers", "rouge_score"):
    pytest.importorskip(module)


def test_victims_offset_draws_held_out_victims_of_other_clients(tmp_path, rotten_tomatoes_csv):
    """Victims with offset k are victims k … of the draw without it, from other clients than victims
    0 … k − 1, so a tuning config (offset 2) and a test config (count 2) never share a text; offset 0,
    the default, leaves the config's hash as it was without the option (stored runs stay valid)."""
    from leakshield.artifacts import ArtifactCache
    from leakshield.text_grid.world import TextWorld

    def world(**victims) -> TextWorld:
        raw = tiny_config(rotten_tomatoes_csv, victims={"batches": [1, 2], **victims})
        return TextWorld(parse_text_config(raw), torch.device("cpu"), cache=ArtifactCache(tmp_path))

    test, held_out, longer = world(count=2), world(count=2, offset=2), world(count=4)
    for batch in (1, 2):
        assert [v.index for v in held_out.victims[batch]] == [2, 3]
        assert [v.client for v in held_out.victims[batch]] == [2, 3]
        for mine, same in zip(held_out.victims[batch], longer.victims[batch][2:], strict=True):
            assert torch.equal(mine.batch.x, same.batch.x)
        seen = {tuple(row.tolist()) for v in test.victims[batch] for row in v.batch.x}
        assert not seen & {tuple(row.tolist()) for v in held_out.victims[batch] for row in v.batch.x}
    explicit = parse_text_config(tiny_config(rotten_tomatoes_csv, victims={"count": 2, "batches": [1, 2],
                                                                           "offset": 0}))  # fmt: skip
    assert test.config.fingerprint() == explicit.fingerprint() != held_out.config.fingerprint()
    # the hash as it was computed before the option existed (no victims.offset in the payload)
    payload = explicit.model_dump(mode="json")
    payload["corpus"].pop("path", None)
    payload["victims"].pop("offset")
    payload["corpus"]["content"] = explicit.corpus.digest()
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    assert explicit.fingerprint() == hashlib.sha256(blob.encode()).hexdigest()[:16]


@pytest.mark.parametrize(
    ("victims", "message"),
    [
        ({"count": 2, "offset": 3}, "victims.offset: 3 + count 2 exceeds fl.clients 4"),
        ({"offset": -1}, "victims.offset"),
    ],
)
def test_an_offset_past_the_clients_is_refused_naming_the_field(tmp_path, victims, message):
    with pytest.raises(ConfigError) as caught:
        parse_text_config(tiny_config(tmp_path / "c.csv", victims=victims))
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)
