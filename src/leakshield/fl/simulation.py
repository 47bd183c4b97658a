"""FedSGD / FedAvg on one machine: a server, its participants and observers, seeded and reproducible."""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence

import torch
from torch import nn
from tqdm.auto import tqdm

from leakshield.artifacts import ArtifactCache
from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.defenses.base import DefensePipeline, Participation
from leakshield.errors import ConfigError
from leakshield.fl.aggregation import Aggregator, create_aggregator
from leakshield.fl.client import HonestClient, seeded_generator
from leakshield.fl.config import FLConfig
from leakshield.fl.participants import Participant, RoundObserver
from leakshield.fl.types import ClientUpdate
from leakshield.seeds import server_generator


class FederatedSimulation:
    """The server's side of FL training of ``model`` with ``participants``.

    Each round the server samples ``clients_per_round`` participants (seeded by seed and round), sends
    each its own copy of the global model, collects the replies, shows them to the ``observers`` and
    applies the aggregate: FedSGD θ ← θ − lr·agg(g); FedAvg θ ← θ + agg(Δθ), buffers averaged by sample
    count. Participants may be honest clients or attackers taking part in training."""

    def __init__(
        self,
        model: nn.Module,
        participants: Sequence[Participant],
        config: FLConfig,
        *,
        aggregator: Aggregator | None = None,
        observers: Sequence[RoundObserver] = (),
        seed: int = 0,
    ) -> None:
        if len(participants) != config.clients:
            raise ValueError(f"{len(participants)} participants for {config.clients} clients")
        self.model = model
        self.participants = list(participants)
        self.config = config
        self.aggregator = aggregator or create_aggregator(config.aggregator)
        self.observers = list(observers)
        self.seed = seed
        self.round = 0
        #: participant id → (local SGD steps taken over all rounds so far, minibatch sampling rate), for
        #: privacy accounting (DP-SGD's ε) of the participants that run the defenses
        self.client_steps: dict[int, tuple[int, float]] = {}
        #: participant id → rounds it sent an update in, for client-level accounting (DP-FedAvg's ε)
        self.client_rounds: dict[int, int] = {}
        #: the server stages of the defenses (central DP's noisy mean; the identity by default)
        self.server_stage = DefensePipeline()
        #: (seconds, updates): wall time the defended participants spent computing their updates, and
        #: how many updates that was (a defense's client cost; a measurement, never a test's input)
        self.client_time: tuple[float, int] = (0.0, 0)

    @classmethod
    def honest(
        cls,
        model: nn.Module,
        clients: Sequence[ImageSet],
        config: FLConfig,
        pipeline: DefensePipeline,
        info: DatasetInfo,
        *,
        public: ImageSet | None = None,
        seed: int = 0,
        observers: Sequence[RoundObserver] = (),
        cache: ArtifactCache | None = None,
    ) -> FederatedSimulation:
        """A federation of honest clients holding ``clients`` (their local datasets); the clients in
        ``config.defended_clients`` (default all) run ``pipeline``'s client stages, the others none."""
        participants = [
            HonestClient(
                client_id=i,
                dataset=data,
                local=config.local,
                pipeline=pipeline if config.is_defended(i) else DefensePipeline(),
                info=info,
                public=public,
                seed=seed,
                accounted=config.is_defended(i),
                cache=cache,
            )
            for i, data in enumerate(clients)
        ]
        sim = cls(model, participants, config, observers=observers, seed=seed)
        sim.server_stage = pipeline
        return sim

    @property
    def refusals(self) -> list[tuple[int, int, str]]:
        """(round, client, reason) of every model a participant's guard refused, in order."""
        found = [(r, p.client_id, why) for p in self.participants for r, why in getattr(p, "refusals", ())]
        return sorted(found)

    def run(self, rounds: int, *, progress: bool = False, desc: str = "FL training") -> nn.Module:
        """Train for ``rounds`` more rounds; returns the (updated in place) global model."""
        for _ in tqdm(range(rounds), desc=desc, disable=not progress, leave=False):
            self.step()
        return self.model

    def step(self) -> None:
        cfg = self.config
        gen = seeded_generator(self.seed, self.round)
        k = cfg.clients_per_round or cfg.clients
        chosen = torch.randperm(cfg.clients, generator=gen)[:k].sort().values.tolist()
        for observer in self.observers:
            observer.round_started(self.round, copy.deepcopy(self.model))
        updates: list[ClientUpdate] = []
        for index in chosen:
            participant = self.participants[index]
            started = time.perf_counter()
            update = participant.fit(copy.deepcopy(self.model), self.round)
            if update is None:
                continue
            if getattr(participant, "accounted", False):
                seconds, count = self.client_time
                self.client_time = (seconds + time.perf_counter() - started, count + 1)
            updates.append(update)
            for observer in self.observers:
                observer.update_received(self.round, participant.client_id, update)
            if getattr(participant, "accounted", False):
                steps, _ = self.client_steps.get(participant.client_id, (0, 0.0))
                rate = float(getattr(participant, "sampling_rate", 1.0))
                self.client_steps[participant.client_id] = (steps + update.protocol.local_steps, rate)
                self.client_rounds[participant.client_id] = (
                    self.client_rounds.get(participant.client_id, 0) + 1
                )
        if updates:
            self._apply(updates)
        for observer in self.observers:
            observer.round_finished(self.round, copy.deepcopy(self.model))
        self.round += 1

    @property
    def participation(self) -> Participation:
        """The defended clients' participation so far, for client-level privacy accounting."""
        k = self.config.clients_per_round or self.config.clients
        return Participation(dict(self.client_rounds), k / self.config.clients, self.round)

    def _apply(self, updates: list[ClientUpdate]) -> None:
        formed = self.server_stage.aggregate_hook(
            [u.delta for u in updates], server_generator(self.seed, self.round)
        )
        if formed is not None and self.aggregator.name != "mean":
            raise ConfigError(
                f"fl.aggregator: {self.aggregator.name}; a defense that forms the step on the server "
                "(a noisy uniform mean, for one) replaces the aggregator: use mean"
            )
        step = formed if formed is not None else self.aggregator.combine(updates)
        buffers = self.aggregator.buffers(updates)
        sign = -self.config.local.local_lr if self.config.local.algorithm == "fedsgd" else 1.0
        with torch.no_grad():
            for name, param in self.model.named_parameters():
                param.add_(sign * step[name])
            for name, buf in self.model.named_buffers():
                if name in buffers:
                    buf.copy_(buffers[name])
