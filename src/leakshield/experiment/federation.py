"""The one builder of a run's world: its data and deterministic client partition (:func:`load_world`),
the global model the server builds with the defenses' model stage (:func:`build_model`) and the
defense pipeline with its fitted artifacts (:func:`fitted_model`). Grid runs, ``leakshield fit``, the
update auditor, probes and the Flower bridge all build through them, and :class:`Federation` is one
federation of a config built the same way wherever it runs: in leakshield's own simulation, in a Flower
``ServerApp`` (the server's model and the auditor's ground truth) or in a Flower ``ClientApp`` (one
client's data and defenses). Every side derives all of it from the config and the seed alone, so
nothing but the model and the update ever crosses the wire."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from leakshield.artifacts import ArtifactCache
from leakshield.data import DatasetSplits, ImageSet, load_dataset, partition_indices
from leakshield.data.types import DatasetInfo
from leakshield.defenses.base import DefensePipeline
from leakshield.errors import ConfigError
from leakshield.experiment.config import Component, ExperimentConfig
from leakshield.experiment.fitting import ArtifactUse, FitSetting, fit_defenses
from leakshield.fl import HonestClient
from leakshield.models import create_model
from leakshield.models.imported import identity

#: ``fits_for`` value: fit no client's artifacts (a server never sees a client's data)
NO_CLIENT = -1


def load_world(config: ExperimentConfig) -> tuple[DatasetSplits, list[ImageSet]]:
    """The config's data splits and every client's dataset (the deterministic partition); the
    components' values are checked against the data's image shape and classes before anything trains."""
    ds = config.dataset
    data = load_dataset(ds.name, ds.params, root=ds.root)
    config.check_data(data.info.shape, data.info.num_classes)
    parts = partition_indices(data.train.y, config.fl.clients, config.fl.partition, config.partition_seed)
    return data, [data.train.subset(p) for p in parts]


def build_model(
    spec: Component, pipeline: DefensePipeline, info: DatasetInfo, seed: int, device: torch.device | str
) -> nn.Module:
    """The untrained global model the server builds: ``spec`` initialized with ``seed``, then the
    defenses' model stage (PRECODE's bottleneck, dropout…, seeded alike), on ``device``."""
    net = create_model(spec.name, spec.params, in_shape=info.shape, num_classes=info.num_classes, seed=seed)
    return pipeline.model_hook(net, seed=seed).to(device)


def fitted_model(
    config: ExperimentConfig,
    spec: Component,
    entries: list[dict],
    data: DatasetSplits,
    clients: list[ImageSet],
    seed: int,
    device: torch.device,
    cache: ArtifactCache,
    progress: bool = False,
) -> tuple[nn.Module, DefensePipeline, list[ArtifactUse]]:
    """The untrained model (:func:`build_model`) and the defense stack ``entries`` with its fitted
    artifacts: public fits on the public split, client fits on each defended client of ``clients``
    (pass empty datasets for clients whose data this process must not see)."""
    pipeline = DefensePipeline.from_config(entries)
    net = build_model(spec, pipeline, data.info, seed, device)
    setting = FitSetting(
        info=data.info,
        public=data.public,
        clients=clients,
        fl=config.fl,
        model=net,
        model_id=identity(spec.name, spec.params),
        seed=seed,
        device=device,
        progress=progress,
    )
    fitted, used = fit_defenses(pipeline, setting, cache)
    return net, fitted, used


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
        data, clients = load_world(config)
        fit_clients = [
            c if fits_for is None or i == fits_for else c.subset(torch.zeros(0, dtype=torch.long))
            for i, c in enumerate(clients)
        ]
        _, pipeline, _ = fitted_model(
            config,
            config.models[0],
            config.defenses[0].entries,
            data,
            [c.to(device) for c in fit_clients],
            seed,
            device,
            cache or ArtifactCache(),
            progress,
        )
        return cls(config, seed, device, data, clients, pipeline)

    @property
    def info(self) -> DatasetInfo:
        return self.data.info

    def pipeline_of_config(self) -> DefensePipeline:
        """The configured defense setting, unfitted."""
        return DefensePipeline.from_config(self.config.defenses[0].entries)

    def fresh_model(self) -> nn.Module:
        """The untrained global model the server builds (seeded; with the defenses' model stage)."""
        return build_model(
            self.config.models[0], self.pipeline_of_config(), self.info, self.seed, self.device
        )

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
