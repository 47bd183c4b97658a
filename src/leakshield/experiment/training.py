"""FL training for a grid: the global model of (model, defense setting, seed) after any number of rounds,
continuing from the latest cached round (the simulation is seeded per round), with the defenses' fitted
artifacts and the clients' privacy accounting."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from leakshield.artifacts import ArtifactCache
from leakshield.data.types import DatasetSplits, ImageSet
from leakshield.defenses.base import DefensePipeline, Participation
from leakshield.experiment.config import Component, DefenseSetting, ExperimentConfig
from leakshield.experiment.federation import build_model, fitted_model
from leakshield.experiment.fitting import ArtifactUse
from leakshield.fl import FederatedSimulation


@dataclass
class TrainedModel:
    """A global model after ``rounds`` rounds, the (fitted) defense pipeline it was trained under, and
    each defended client's (local steps, sampling rate) so far."""

    model: nn.Module
    pipeline: DefensePipeline
    client_steps: dict[int, tuple[int, float]]
    rounds: int
    #: (seconds, updates) the defended clients spent computing their updates over these rounds
    client_time: tuple[float, int] = (0.0, 0)
    #: the defended clients' participation (client-level accounting); None before any round
    participation: Participation | None = None


@dataclass
class TrainedModels:
    """Trains and caches the global models of a grid (see the module docstring)."""

    config: ExperimentConfig
    data: DatasetSplits
    #: the clients' datasets and the public split, on ``device``
    clients: list[ImageSet]
    public: ImageSet
    device: torch.device
    cache: ArtifactCache
    progress: bool = False
    used: list[ArtifactUse] = field(default_factory=list)
    _states: dict[tuple, tuple[dict[str, torch.Tensor], DefensePipeline, dict, tuple[float, int], dict]] = (
        field(default_factory=dict)
    )

    def fresh(
        self, model: Component, defense: DefenseSetting, seed: int
    ) -> tuple[nn.Module, DefensePipeline]:
        """The untrained model the server builds for the cell (with the defenses' model stage) and the
        pipeline with its fitted artifacts."""
        net, pipeline, used = fitted_model(
            self.config,
            model,
            defense.entries,
            self.data,
            self.clients,
            seed,
            self.device,
            self.cache,
            self.progress,
        )
        self.used.extend(u for u in used if u not in self.used)
        return net, pipeline

    def at_round(self, model: Component, defense: DefenseSetting, seed: int, rounds: int) -> TrainedModel:
        base_key = (model.display, defense.display, seed)
        cached = [key[3] for key in self._states if key[:3] == base_key and key[3] <= rounds]
        start = 0
        client_steps: dict[int, tuple[int, float]] = {}
        client_time = (0.0, 0)
        client_rounds: dict[int, int] = {}
        if cached:
            start = max(cached)
            state, pipeline, client_steps, client_time, client_rounds = self._states[(*base_key, start)]
            net = build_model(model, pipeline, self.data.info, seed, self.device)
            net.load_state_dict(state)
        else:
            net, pipeline = self.fresh(model, defense, seed)
        if rounds > start:
            sim = FederatedSimulation.honest(
                net,
                self.clients,
                self.config.fl_for(defense),
                pipeline,
                self.data.info,
                public=self.public,
                seed=seed,
                cache=self.cache,
            )
            sim.round = start
            sim.client_steps = dict(client_steps)
            sim.client_time = client_time
            sim.client_rounds = dict(client_rounds)
            sim.run(rounds - start, progress=self.progress, desc=f"FL rounds {start}→{rounds}")
            client_steps, client_time, client_rounds = sim.client_steps, sim.client_time, sim.client_rounds
        state = {k: v.detach().clone() for k, v in net.state_dict().items()}
        self._states[(*base_key, rounds)] = (
            state,
            pipeline,
            dict(client_steps),
            client_time,
            dict(client_rounds),
        )
        fl = self.config.fl_for(defense)
        rate = (fl.clients_per_round or fl.clients) / fl.clients
        participation = Participation(dict(client_rounds), rate, rounds)
        return TrainedModel(net, pipeline, dict(client_steps), rounds, client_time, participation)
