"""The two cell protocols without an attack: the no-information baseline and utility."""

from __future__ import annotations

from leakshield.data import ImageSet
from leakshield.defenses.convergence import fit_convergence, worst
from leakshield.experiment.cells import Cell
from leakshield.experiment.protocols import CellOutput, register_protocol
from leakshield.experiment.world import ExperimentContext
from leakshield.metrics.sensitivity import sensitive_subset
from leakshield.metrics.utility import accuracy


@register_protocol("baseline", "an attacker's no-information guess as every victim's reconstruction")
def run_baseline(world: ExperimentContext, cell: Cell) -> CellOutput:
    """The no-information 'reconstruction' (:meth:`ExperimentContext.no_information_guess`): the public
    split's mean image, or with ``metrics.no_information: leave-one-out`` the mean of the dataset's
    images outside each victim's batch."""
    victims = world.victims_of(cell.scale, cell.seed)
    return world.score([world.no_information_guess(b) for b in victims], list(victims))


@register_protocol("utility", "FL training under the defense setting → test accuracy and privacy spent")
def run_utility(world: ExperimentContext, cell: Cell) -> CellOutput:
    assert cell.model and cell.defense and cell.round is not None and cell.seed is not None
    trained = world.models.at_round(cell.model, cell.defense, cell.seed, cell.round)
    net, norm, data = trained.model, world.info.normalize, world.data
    test_acc = accuracy(net, data.test.to(world.device), normalize=norm)
    train_acc = accuracy(net, ImageSet(data.train.x, data.train.y).to(world.device), normalize=norm)
    public_acc = accuracy(net, data.public.to(world.device), normalize=norm)
    metrics = {
        "accuracy": test_acc,
        "accuracy_train": train_acc,
        "accuracy_public": public_acc,  # model selection (the leaderboard's tuning) reads this, not test
        "chance": 1.0 / world.info.num_classes,  # the leaderboard's utility gate starts from it
        "test_examples": float(len(data.test)),  # the accuracy interval's binomial error
        **trained.pipeline.privacy_spent(trained.client_steps, trained.participation),
    }
    criteria = fit_convergence([d.artifact for d in trained.pipeline.defenses if d.artifact is not None]
                               + list(trained.pipeline.client_artifacts.values()))  # fmt: skip
    if criteria:  # fitted defenses: did their budget converge (leaderboard: "under budget")
        missed = worst(criteria)
        metrics["fit_converged"] = float(missed is None)
        if missed is not None:
            metrics["under_budget"] = missed.text()
    seconds, updates = trained.client_time
    if updates:  # a measurement (wall time), for the leaderboard's cost column
        metrics["client_seconds"] = seconds / updates
    fl = world.config.fl
    defended = [c for i, c in enumerate(world.models.clients) if fl.is_defended(i) and len(c)]
    sensitive = sensitive_subset(defended, world.config.metrics.sensitive, trained.pipeline.sensitive_samples)
    if sensitive is not None:
        metrics["accuracy_sensitive"] = accuracy(net, sensitive, normalize=norm)
        metrics["sensitive_samples"] = float(len(sensitive))
    return CellOutput(metrics=metrics, victims=[])
