"""Cells of participant attacks (the GAN attack of Hitaj et al.): the attacker joins FL training as one
of the clients, and its generator is scored against the private images of the classes it targets by
class-level SSIM (Anti-GAN Eq. 5) — feature inference, not the reconstruction of given victims.

The federation is the grid's (clients, partition, protocol); the model starts from the grid's attack
round (honest training up to it, as for every attack cell) and trains ``rounds`` more rounds with the
attacker taking part. The honest clients run the defense pipeline where the config defends them.
Reported next to the attack's score: ``class_ssim_public``, the class-level SSIM of the public split's
real images of the same classes, i.e. what a generator that had learned the class distribution
perfectly would score.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from leakshield.attacks.gan.hitaj import HitajGAN
from leakshield.data.types import ImageSet
from leakshield.defenses.base import DefensePipeline
from leakshield.errors import ConfigError
from leakshield.experiment.cells import Cell
from leakshield.fl import FederatedSimulation, HonestClient
from leakshield.fl.participants import Participant
from leakshield.fl.types import ClientUpdate
from leakshield.metrics.class_ssim import class_level_ssim
from leakshield.metrics.utility import accuracy

if TYPE_CHECKING:
    from torch import nn

    from leakshield.experiment.pipeline import CellOutput, ExperimentContext

GRID_COLUMNS = 10


@dataclass
class SilencedClient:
    """A client whose replies never reach the server (the control of the GAN attack)."""

    client_id: int

    def fit(self, model: nn.Module, round: int) -> ClientUpdate | None:
        return None


def run_feature_inference(ctx: ExperimentContext, cell: Cell, attack: HitajGAN) -> CellOutput:
    """One participant-attack cell (see the module docstring)."""
    from leakshield.experiment.pipeline import CellOutput

    assert cell.model and cell.defense and cell.round is not None and cell.seed is not None
    fl, p, info = ctx.config.fl, attack.params, ctx.info
    attacker_id = fl.clients - 1 if p.attacker is None else p.attacker
    if attacker_id >= fl.clients:
        raise ConfigError(
            f"{attack.name}.attacker: client {attacker_id} of {fl.clients} (0..{fl.clients - 1})"
        )
    trained = ctx.models.at_round(cell.model, cell.defense, cell.seed, cell.round)
    model, start = trained.model, cell.round
    if not p.victim_updates:  # the control: the victims' updates never reached the server, from round 0
        model, start = ctx.models.fresh(cell.model, cell.defense, cell.seed)[0], 0
    clients = ctx.models.clients
    attacker = attack.participant(attacker_id, clients[attacker_id], fl.local, info, cell.seed)
    attacker.active_from = cell.round
    victims = [i for i in range(fl.clients) if i != attacker_id and fl.is_defended(i) and len(clients[i])]
    participants: list[Participant] = []
    for i, data in enumerate(clients):
        if i == attacker_id:
            participants.append(attacker)
        elif i in victims and not p.victim_updates:
            participants.append(SilencedClient(i))
        else:
            participants.append(
                HonestClient(i, data, fl.local, trained.pipeline if fl.is_defended(i) else DefensePipeline(),
                             info, public=ctx.models.public, seed=cell.seed, accounted=fl.is_defended(i))
            )  # fmt: skip
    sim = FederatedSimulation(model, participants, fl, seed=cell.seed)
    sim.round = start
    if start < cell.round:  # the control's rounds before the attack, the victims silent
        sim.run(cell.round - start, progress=ctx.progress, desc="FL rounds without the victims")
    sim.run(p.rounds, progress=ctx.progress, desc=f"{attack.name}: FL rounds with the attacker")
    attacker.train_generator(sim.model, p.final_steps)

    targets = torch.tensor(attacker.targets, device=ctx.device)
    private = _of_classes([clients[i] for i in victims], targets)
    if not len(private):
        raise ConfigError(f"{attack.name}: no defended client holds the target classes {attacker.targets}")
    value, per_class, samples = attack.score(attacker, private, cell.seed)
    public = _of_classes([ctx.models.public], targets)
    metrics = {"class_ssim": value, "samples": float(len(samples))}
    if len(public):
        metrics["class_ssim_public"] = class_level_ssim(public.x, public.y, private.x, private.y,
                                                        window=p.window)[0]  # fmt: skip
    metrics["accuracy_attacked"] = accuracy(sim.model, ctx.data.test.to(ctx.device), normalize=info.normalize)
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
