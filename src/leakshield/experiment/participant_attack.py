"""The participant-attack cell protocol: the attacker joins FL training as one of the clients; at the
end it releases its output (labelled samples of the classes it targets), and the evaluator — which
alone holds the defended clients' private images — scores them by class-level SSIM (Anti-GAN Eq. 5):
feature inference, not the reconstruction of given victims.

The federation is the grid's (clients, partition, protocol); the model starts from the grid's attack
round (honest training up to it, as for every attack cell) and trains the attack's rounds with the
attacker taking part. The honest clients run the defense pipeline where the config defends them.
Reported next to the attack's score: ``class_ssim_public``, the class-level SSIM of the public split's
real images of the same classes, i.e. what an attacker that had learned the class distribution
perfectly would score.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from leakshield.data.types import ImageSet
from leakshield.defenses.base import DefensePipeline
from leakshield.errors import ConfigError
from leakshield.experiment.cells import Cell
from leakshield.experiment.protocols import CellOutput, register_protocol
from leakshield.experiment.world import ExperimentContext
from leakshield.fl import FederatedSimulation, HonestClient
from leakshield.fl.participants import Participant
from leakshield.fl.types import ClientUpdate
from leakshield.metrics.class_ssim import class_level_ssim
from leakshield.metrics.utility import accuracy

GRID_COLUMNS = 10


@dataclass
class SilencedClient:
    """A client whose replies never reach the server (the control of a participant attack)."""

    client_id: int

    def fit(self, model: nn.Module, round: int) -> ClientUpdate | None:
        return None


@register_protocol(
    "participant-attack",
    "a malicious client trains inside the federation; the evaluator scores the samples it releases",
)
def run_participant_attack(world: ExperimentContext, cell: Cell) -> CellOutput:
    """One participant-attack cell (see the module docstring)."""
    assert cell.model and cell.defense and cell.attack and cell.round is not None and cell.seed is not None
    attack = world.config.create_attack(cell.attack)
    fl, plan, info = world.config.fl_for(cell.defense), attack.participation(), world.info
    attacker_id = fl.clients - 1 if plan.attacker is None else plan.attacker
    if attacker_id >= fl.clients:
        raise ConfigError(
            f"{attack.name}.attacker: client {attacker_id} of {fl.clients} (0..{fl.clients - 1})"
        )
    trained = world.models.at_round(cell.model, cell.defense, cell.seed, cell.round)
    model, start = trained.model, cell.round
    if not plan.victims_heard:  # the control: the victims' updates never reached the server, from round 0
        model, start = world.models.fresh(cell.model, cell.defense, cell.seed)[0], 0
    clients = world.models.clients
    attacker = attack.participant(attacker_id, clients[attacker_id], fl.local, info, cell.seed)
    attacker.active_from = cell.round
    victims = [i for i in range(fl.clients) if i != attacker_id and fl.is_defended(i) and len(clients[i])]
    participants: list[Participant] = []
    for i, data in enumerate(clients):
        if i == attacker_id:
            participants.append(attacker)
        elif i in victims and not plan.victims_heard:
            participants.append(SilencedClient(i))
        else:
            participants.append(
                HonestClient(i, data, fl.local, trained.pipeline if fl.is_defended(i) else DefensePipeline(),
                             info, public=world.models.public, seed=cell.seed, accounted=fl.is_defended(i))
            )  # fmt: skip
    sim = FederatedSimulation(model, participants, fl, seed=cell.seed)
    sim.server_stage = trained.pipeline  # central DP's noise reaches the participant's global models
    sim.round = start
    if start < cell.round:  # the control's rounds before the attack, the victims silent
        sim.run(cell.round - start, progress=world.progress, desc="FL rounds without the victims")
    sim.run(plan.rounds, progress=world.progress, desc=f"{attack.name}: FL rounds with the attacker")
    attacker.finish(sim.model)
    released = attacker.release(plan.samples, cell.seed)

    # the evaluator: the defended clients' private images of the target classes
    targets = torch.tensor(attacker.targets, device=world.device)
    private = _of_classes([clients[i] for i in victims], targets)
    if not len(private):
        raise ConfigError(f"{attack.name}: no defended client holds the target classes {attacker.targets}")
    samples = ImageSet(released.x.to(world.device), released.y.to(world.device))
    value, per_class = class_level_ssim(samples.x, samples.y, private.x, private.y, window=plan.window)
    public = _of_classes([world.models.public], targets)
    metrics = {"class_ssim": value, "samples": float(len(samples))}
    if len(public):
        metrics["class_ssim_public"] = class_level_ssim(public.x, public.y, private.x, private.y,
                                                        window=plan.window)[0]  # fmt: skip
    metrics["accuracy_attacked"] = accuracy(sim.model, world.data.test.to(world.device),
                                            normalize=info.normalize)  # fmt: skip
    return CellOutput(
        metrics=metrics,
        victims=[{"class": c, "class_ssim": v} for c, v in per_class.items()],
        grid_rows=_grid(private, samples, attacker.targets),
    )


def _of_classes(sets: list[ImageSet], classes: torch.Tensor) -> ImageSet:
    xs = [s.x[torch.isin(s.y, classes.to(s.y.device))] for s in sets]
    ys = [s.y[torch.isin(s.y, classes.to(s.y.device))] for s in sets]
    return ImageSet(torch.cat(xs), torch.cat(ys))


def _grid(private: ImageSet, samples: ImageSet, targets: list[int]) -> list[torch.Tensor]:
    """Per target class: a row of private images, then a row of the attacker's samples."""
    pairs = [(private.x[private.y == c], samples.x[samples.y.to(private.y.device) == c]) for c in targets]
    k = min([GRID_COLUMNS] + [min(len(real), len(fake)) for real, fake in pairs])
    return [t[:k].cpu() for pair in pairs[:GRID_COLUMNS] for t in pair] if k else []
