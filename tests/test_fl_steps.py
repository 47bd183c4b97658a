"""DefenseSteps: leakshield's client stages in a loop that is not leakshield's give leakshield's update."""

from __future__ import annotations

import copy

import torch

from leakshield.data import load_dataset
from leakshield.defenses.base import DefensePipeline
from leakshield.fl import DefenseSteps, HonestClient, LocalTraining
from leakshield.models import create_model


def test_a_users_fedsgd_step_with_the_stages_releases_the_honest_clients_update() -> None:
    data = load_dataset("digits", {"channels": 1, "size": 16})
    info, dataset = data.info, data.train.subset(torch.arange(40))
    pipeline = DefensePipeline.from_config(
        [{"name": "mixup", "params": {}}, {"name": "gaussian-noise", "params": {"sigma": 0.01}}]
    )
    model = create_model("lenet", {}, in_shape=info.shape, num_classes=info.num_classes, seed=0)
    client = HonestClient(3, dataset, LocalTraining(batch_size=4), pipeline, info, seed=5)
    expected = client.fit(copy.deepcopy(model), round=2)

    # the user's own step: its own copy of the model, leakshield's stages around its own gradient call
    steps = DefenseSteps.for_round(pipeline, client_id=3, round=2, dataset=dataset, info=info, seed=5)
    batch = steps.fedsgd_batch(4)
    x, y = steps.batch(batch.x, batch.y, batch=batch)
    mine = copy.deepcopy(model).train()
    released = steps.release(steps.gradient(mine, x, y, batch=batch))

    assert released.keys() == expected.delta.keys()
    for name, value in released.items():
        assert torch.equal(value, expected.delta[name]), name
    plain = DefenseSteps.for_round(
        DefensePipeline(), client_id=3, round=2, dataset=dataset, info=info, seed=5
    )
    b = plain.fedsgd_batch(4)
    undefended = plain.gradient(copy.deepcopy(model).train(), b.x, b.y)
    assert not torch.equal(undefended["classifier.weight"], released["classifier.weight"])
