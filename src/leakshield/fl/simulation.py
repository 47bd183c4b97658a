"""FedSGD / FedAvg simulation of many clients on one machine, seeded and reproducible."""

from __future__ import annotations

import torch
from torch import nn
from tqdm.auto import tqdm

from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.defenses.base import DefensePipeline
from leakshield.fl.client import compute_update
from leakshield.fl.config import FLConfig
from leakshield.fl.types import ClientUpdate


def seeded_generator(*keys: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A generator whose seed is a deterministic function of ``keys`` (e.g. seed, round, client)."""
    value = 0
    for key in keys:
        value = (value * 1_000_003 + int(key) + 1) % (2**63 - 1)
    return torch.Generator(device=device).manual_seed(value)


class FederatedSimulation:
    """Simulates FL training of ``model`` over ``clients`` (their local training sets).

    Each round samples ``clients_per_round`` clients; each computes its update through the defense
    pipeline (``compute_update``); the server averages them weighted by sample count. FedSGD: θ ← θ −
    lr·ḡ over one random minibatch per client; FedAvg: θ ← θ + mean Δθ, buffers averaged likewise.
    """

    def __init__(
        self,
        model: nn.Module,
        clients: list[ImageSet],
        config: FLConfig,
        defenses: DefensePipeline,
        info: DatasetInfo,
        *,
        seed: int = 0,
    ) -> None:
        if len(clients) != config.clients:
            raise ValueError(f"{len(clients)} client datasets for {config.clients} clients")
        self.model = model
        self.clients = clients
        self.config = config
        self.defenses = defenses
        self.info = info
        self.seed = seed
        self.round = 0
        #: client index → (local SGD steps taken over all rounds so far, minibatch sampling rate), for
        #: privacy accounting (DP-SGD's ε)
        self.client_steps: dict[int, tuple[int, float]] = {}

    def run(self, rounds: int, *, progress: bool = False, desc: str = "FL training") -> nn.Module:
        """Train for ``rounds`` more rounds; returns the (updated in place) global model."""
        for _ in tqdm(range(rounds), desc=desc, disable=not progress, leave=False):
            self.step()
        return self.model

    def step(self) -> None:
        cfg = self.config
        device = next(self.model.parameters()).device
        gen = seeded_generator(self.seed, self.round)
        k = cfg.clients_per_round or cfg.clients
        chosen = torch.randperm(cfg.clients, generator=gen)[:k].sort().values.tolist()
        updates: list[ClientUpdate] = []
        for client in chosen:
            local = data = self.clients[client]
            if len(data) == 0:
                continue
            client_gen = seeded_generator(self.seed, self.round, client, device=device)
            if cfg.local.algorithm == "fedsgd":
                pick = torch.randperm(len(data), generator=gen)[: cfg.local.batch_size]
                data = data.subset(pick.sort().values)
            update, _ = compute_update(
                self.model,
                data,
                cfg.local,
                self.defenses if cfg.is_defended(client) else DefensePipeline(),
                normalize=self.info.normalize,
                generator=client_gen,
                model_mode="train",
                pool=local,
            )
            updates.append(update)
            if not cfg.is_defended(client):
                continue
            steps, _ = self.client_steps.get(client, (0, 0.0))
            rate = min(1.0, cfg.local.batch_size / len(local))
            self.client_steps[client] = (steps + update.protocol.local_steps, rate)
        if updates:
            self._aggregate(updates)
        self.round += 1

    def _aggregate(self, updates: list[ClientUpdate]) -> None:
        total = sum(u.protocol.num_samples for u in updates)
        weights = [u.protocol.num_samples / total for u in updates]
        sign = -self.config.local.local_lr if self.config.local.algorithm == "fedsgd" else 1.0
        with torch.no_grad():
            for name, param in self.model.named_parameters():
                param.add_(sign * sum(w * u.delta[name] for w, u in zip(weights, updates, strict=True)))
            for name, buf in self.model.named_buffers():
                if updates[0].buffers and buf.is_floating_point():
                    buf.copy_(sum(w * u.buffers[name] for w, u in zip(weights, updates, strict=True)))
                elif updates[0].buffers:
                    buf.copy_(updates[0].buffers[name])
