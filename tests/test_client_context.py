"""What a client stage receives: the minibatch's rows in the client's dataset, the client's seed and the
run's artifact cache. Data-stage defenses with precomputed per-image replacements (LODA, Anti-GAN) swap
each image for the replacement at its row, by index."""

from __future__ import annotations

import pytest
import torch

from leakshield.artifacts import Artifact, ArtifactCache
from leakshield.data import load_dataset
from leakshield.defenses import DefensePipeline
from leakshield.defenses.base import ClientContext, Defense
from leakshield.fl import HonestClient, LocalTraining
from leakshield.models import create_model


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", {"channels": 1, "size": 16})


def marked(n: int, shape) -> torch.Tensor:
    """Replacement images whose every pixel says their row: row i is filled with (i + 1) / (n + 1)."""
    return ((torch.arange(n, dtype=torch.float32) + 1) / (n + 1)).view(n, 1, 1, 1).expand(n, *shape).clone()


@pytest.mark.parametrize("name", ["loda", "antigan"])
@pytest.mark.parametrize("algorithm", ["fedsgd", "fedavg"])
def test_data_stage_swaps_in_each_images_own_replacement_by_index(digits, name, algorithm):
    data = digits.train.subset(list(range(20)))
    key = "obscured" if name == "loda" else "mixed"
    replacements = marked(len(data), digits.info.shape)
    pipeline = DefensePipeline.from_config([{"name": name}])
    pipeline = pipeline.with_artifacts({}, {(0, 0): Artifact({key: replacements})})
    local = LocalTraining(algorithm=algorithm, batch_size=4, shuffle=True)
    client = HonestClient(0, data, local, pipeline, digits.info, model_mode="eval", seed=3)
    model = create_model("mlp", {"width": 8}, in_shape=digits.info.shape, num_classes=10, seed=0).eval()
    generator = client.generator(5)
    batch, rows = client._round_data(generator)
    _, trace = client.compute(model, 5, batch, client.generator(5), indices=rows)
    assert torch.equal(trace.defended_x, replacements[rows])


def test_a_stage_receives_the_rows_the_seed_and_the_cache(digits, tmp_path):
    seen: list[ClientContext] = []

    class Spy(Defense):
        def data_hook(self, x, y, context):
            seen.append(context)
            return x, y

    data = digits.train.subset(list(range(12)))
    cache = ArtifactCache(tmp_path)
    local = LocalTraining(algorithm="fedavg", batch_size=5, shuffle=True)
    client = HonestClient(2, data, local, DefensePipeline([Spy(None)]), digits.info, seed=7, cache=cache)
    model = create_model("mlp", {"width": 8}, in_shape=digits.info.shape, num_classes=10, seed=0)
    client.fit(model, 1)
    assert [len(c.indices) for c in seen] == [5, 5, 2]
    assert sorted(torch.cat([c.indices for c in seen]).tolist()) == list(range(12))  # each row once
    for context in seen:
        assert torch.equal(context.batch.x, data.x[context.indices])
        assert context.seed == 7 and context.cache is cache and context.client_id == 2
