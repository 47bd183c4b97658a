"""One federation of an experiment config, built the same way wherever it runs: in leakshield's own
simulation, in a Flower ``ServerApp`` (the server's model and the auditor's ground truth) or in a Flower
``ClientApp`` (one client's data and defenses). Every side derives the data, the deterministic
partition, the model (with the defenses' model stage) and the fitted defenses from the config and the
seed alone, so nothing but the model and the update ever crosses the wire."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from leakshield.artifacts import ArtifactCache
from leakshield.data import DatasetSplits, ImageSet, load_dataset, partition_indices
from leakshield.data.types import DatasetInfo
from leakshield.defenses.base import DefensePipeline
from leakshield.errors import ConfigError
from leakshield.experiment.config import ExperimentConfig
from leakshield.experiment.fitting import FitSetting, fit_defenses
from leakshield.fl import HonestClient
from leakshield.models import create_model

#: ``fits_for`` value: fit no client's artifacts (a server never sees a client's data)
NO_CLIENT = -1


@dataclass
class Federation:
    """The data, partition, model and defense pipeline of ``config`` (its first model and defense
    setting) for ``seed`` on ``device``. ``clients[i]`` is client i's dataset (pixels in [0, 1])."""

    config: ExperimentConfig
    seed: int
    device: torch.device
    data: DatasetSplits
    clients: list[ImageSet]
    pipeline: DefensePipeline

    @classmethod
    def build(
        cls,
        config: ExperimentConfig,
        *,
        seed: int | None = None,
        device: torch.device | str = "cpu",
        fits_for: int | None = None,
        cache: ArtifactCache | None = None,
        progress: bool = False,
    ) -> Federation:
        """``fits_for``: whose client-scope artifacts (e.g. LODA's obscured data) this process fits:
        None every defended client (a simulation), a client id (that client's own process), or
        :data:`NO_CLIENT` (a server)."""
        if len(config.models) != 1 or len(config.defenses) != 1:
            raise ConfigError(
                f"models / defenses: a federation runs one model and one defense setting; the config "
                f"lists {len(config.models)} model(s) and {len(config.defenses)} defense setting(s)"
            )
        seed = config.seeds[0] if seed is None else seed
        device = torch.device(device)
        ds = config.dataset
        data = load_dataset(ds.name, ds.params, root=ds.root)
        parts = partition_indices(data.train.y, config.fl.clients, config.fl.partition, config.partition_seed)
        clients = [data.train.subset(p) for p in parts]
        fit_clients = [
            c if fits_for is None or i == fits_for else c.subset(torch.zeros(0, dtype=torch.long))
            for i, c in enumerate(clients)
        ]
        federation = cls(config, seed, device, data, clients, DefensePipeline())
        net = federation.fresh_model()
        setting = FitSetting(
            info=data.info,
            public=data.public,
            clients=[c.to(device) for c in fit_clients],
            fl=config.fl,
            model=net,
            model_id={"name": config.models[0].name, **config.models[0].params},
            seed=seed,
            device=device,
            progress=progress,
        )
        federation.pipeline, _ = fit_defenses(
            federation.pipeline_of_config(), setting, cache or ArtifactCache()
        )
        return federation

    @property
    def info(self) -> DatasetInfo:
        return self.data.info

    def pipeline_of_config(self) -> DefensePipeline:
        """The configured defense setting, unfitted."""
        return DefensePipeline.from_config(self.config.defenses[0].entries)

    def fresh_model(self) -> nn.Module:
        """The untrained global model the server builds (seeded; with the defenses' model stage)."""
        spec, info = self.config.models[0], self.data.info
        net = create_model(
            spec.name, spec.params, in_shape=info.shape, num_classes=info.num_classes, seed=self.seed
        )
        return self.pipeline_of_config().model_hook(net, seed=self.seed).to(self.device)

    def client(self, client_id: int) -> HonestClient:
        """Honest client ``client_id`` as :meth:`FederatedSimulation.honest` builds it."""
        if not 0 <= client_id < len(self.clients):
            raise ConfigError(
                f"client id {client_id}: the federation has clients 0 to {len(self.clients) - 1}"
            )
        fl = self.config.fl
        return HonestClient(
            client_id=client_id,
            dataset=self.clients[client_id].to(self.device),
            local=fl.local,
            pipeline=self.pipeline if fl.is_defended(client_id) else DefensePipeline(),
            info=self.data.info,
            public=self.data.public.to(self.device),
            seed=self.seed,
            accounted=fl.is_defended(client_id),
        )
