"""The cell metrics that are not an attack's score measure what their registry entry says: the utility
cell's ``accuracy`` and ``accuracy_train`` on the test and training splits; the participant attack's
``accuracy_attacked`` (the model after the rounds with the attacker, on the test split) and
``class_ssim_public`` (the public split's real images of the attacked classes against the victims'); and
every record's ``seconds`` (the time the cell took, inside the run's own span)."""

from __future__ import annotations

import time

import pytest
import torch

from leakshield.data import load_dataset
from leakshield.experiment import (
    ExperimentRunner,
    ResultStore,
    parse_config,
    participant_attack,
    reference_cells,
)
from leakshield.fl import FederatedSimulation
from leakshield.metrics.class_ssim import class_level_ssim
from leakshield.metrics.utility import accuracy

CONFIG = {
    "name": "cell-metrics",
    "dataset": {"name": "digits", "size": 16},
    "models": ["antigan-cnn"],
    "fl": {"clients": 2, "partition": {"kind": "by-class", "classes": [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]},
           "local": {"algorithm": "fedavg", "local_lr": 0.05, "batch_size": 32}, "defended_clients": [0]},
    "defenses": ["none"],
    "attack": {"rounds": [2]},
    "attacks": [{"name": "hitaj", "rounds": 2, "generator_steps": 2, "final_steps": 2, "samples": 20,
                 "width": 8, "window": 4}],
    "utility": {"rounds": 2},
}  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One tiny grid (a utility cell and a hitaj cell), with what its cells evaluated."""
    tmp = tmp_path_factory.mktemp("cell-metrics")
    seen: dict[str, list] = {"simulations": [], "utility_models": []}

    class RecordedSimulation(FederatedSimulation):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            seen["simulations"].append(self)

    def recorded_accuracy(net, data, **kwargs):
        seen["utility_models"].append(net)
        return accuracy(net, data, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(participant_attack, "FederatedSimulation", RecordedSimulation)
        patch.setattr(reference_cells, "accuracy", recorded_accuracy)
        runner = ExperimentRunner(parse_config(CONFIG), tmp / "run", device="cpu", progress=False,
                                  cache_dir=tmp / "cache")  # fmt: skip
        started = time.time()
        runner.run()
        span = time.time() - started
    records = ResultStore(tmp / "run" / "results.sqlite").records()
    return records, seen, span


def _record(records, kind: str):
    (found,) = [r for r in records if r.kind == kind or r.attack == kind]
    assert found.status == "ok", found.error
    return found


def test_utility_accuracies_are_measured_on_the_test_and_the_training_split(run):
    records, seen, _ = run
    data = load_dataset("digits", {"size": 16})
    utility = _record(records, "utility")
    (net,) = set(seen["utility_models"])
    assert utility.metrics["accuracy"] == accuracy(net, data.test, normalize=data.info.normalize)
    assert utility.metrics["accuracy_train"] == accuracy(net, data.train, normalize=data.info.normalize)
    assert utility.metrics["accuracy"] != utility.metrics["accuracy_train"]  # the splits tell apart
    assert utility.metrics["chance"] == 1 / data.info.num_classes  # the leaderboard's utility gate


def test_accuracy_attacked_is_the_test_accuracy_after_the_attackers_rounds(run):
    records, seen, _ = run
    data = load_dataset("digits", {"size": 16})
    (sim,) = seen["simulations"]
    attacked = _record(records, "hitaj").metrics["accuracy_attacked"]
    assert sim.round == 4  # two honest rounds, then the attacker's two
    assert attacked == accuracy(sim.model, data.test, normalize=data.info.normalize)
    assert attacked != accuracy(sim.model, data.public, normalize=data.info.normalize)


def test_class_ssim_public_scores_the_public_images_of_the_attacked_classes_against_the_victims(run):
    records, _, _ = run
    data = load_dataset("digits", {"size": 16})
    record = _record(records, "hitaj")
    targets = torch.tensor([0, 1, 2, 3, 4])  # the classes only the defended client 0 holds
    public = torch.isin(data.public.y, targets)
    private = torch.isin(data.train.y, targets)
    expected, _ = class_level_ssim(data.public.x[public], data.public.y[public], data.train.x[private],
                                   data.train.y[private], window=4)  # fmt: skip
    assert record.metrics["class_ssim_public"] == pytest.approx(expected, abs=1e-6)


def test_every_record_times_its_cell_within_the_run(run):
    records, _, span = run
    assert {r.kind for r in records} == {"baseline", "utility", "attack"}
    for r in records:
        assert 0 < r.seconds <= span
        assert r.metrics.get("seconds", r.seconds) == r.seconds
