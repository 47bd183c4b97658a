"""The detection cell protocol: how well a defense setting's client guard (the ``inspect`` stage)
tells a malicious server's models from honest ones.

True positives: for every configured attack whose threat changes the model sent, at every attack
round, the model it prepares from the honest global model is shown to every defended client; the
true-positive rate is the share refused. False positives: the honest global model of every round of a
normal federation of the cell's ``round`` rounds (the config's utility rounds) is shown to every
defended client; the false-positive rate is the share refused. Rates are NaN where nothing was judged
(no model-modifying attack configured)."""

from __future__ import annotations

import math

from torch import nn

from leakshield.experiment.cells import Cell
from leakshield.experiment.protocols import CellOutput, register_protocol
from leakshield.experiment.server_attack import fitted_attack
from leakshield.experiment.world import ExperimentContext
from leakshield.fl import HonestClient, ServerKnowledge
from leakshield.seeds import seeded_generator

#: the key of the detection cell's client streams
DETECTION_STREAM = 0xDE7EC7


@register_protocol(
    "detection",
    "a client guard judges models prepared by model-modifying attacks (TPR) and honest models (FPR)",
)
def run_detection(world: ExperimentContext, cell: Cell) -> CellOutput:
    assert cell.model and cell.defense and cell.round is not None and cell.seed is not None
    config, fl = world.config, world.config.fl_for(cell.defense)
    pipeline = world.models.at_round(cell.model, cell.defense, cell.seed, 0).pipeline
    clients = [
        HonestClient(i, data, fl.local, pipeline, world.info, public=world.models.public, seed=cell.seed)
        for i, data in enumerate(world.models.clients)
        if fl.is_defended(i) and len(data)
    ]

    honest_models: dict[int, nn.Module] = {}

    def honest(r: int) -> nn.Module:  # each round's honest global model, built once
        if r not in honest_models:
            honest_models[r] = world.models.at_round(cell.model, cell.defense, cell.seed, r).model
        return honest_models[r]

    def refused(model, round: int) -> list[bool]:
        # the honest model of the round before is what every client accepted then (guards that compare)
        before = honest(round - 1) if round and pipeline.needs_previous else None
        verdicts = [
            c.inspect(model, round, seeded_generator(cell.seed, DETECTION_STREAM, round, c.client_id), before)
            for c in clients
        ]
        return [not v.accepted for v in verdicts]

    knowledge = ServerKnowledge(world.info, world.data.public, defenses=pipeline.public_config())
    rows, positives = [], []
    for spec in config.attacks:
        if not config.create_attack(spec).threat.modifies_model:
            continue
        attack = fitted_attack(world, cell, spec)  # SEER's model is trained on the public split first
        judged = []
        for r in config.attack.rounds:
            judged += refused(attack.prepare_model(honest(r), knowledge).model, r)
        positives += judged
        rows.append({"attack": spec.display, "tpr": _rate(judged), "models": len(judged)})
    negatives = []
    for r in range(cell.round):
        negatives += refused(honest(r), r)
    metrics = {
        "tpr": _rate(positives),
        "fpr": _rate(negatives),
        "models_malicious": float(len(positives)),
        "models_honest": float(len(negatives)),
    }
    rows.append({"attack": "honest rounds", "fpr": metrics["fpr"], "models": len(negatives)})
    return CellOutput(metrics=metrics, victims=rows)


def _rate(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else math.nan
