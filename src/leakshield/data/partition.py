"""Partitioning a training set across FL clients: IID, Dirichlet non-IID, by class, fixed size."""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
import pydantic
import torch

from leakshield.errors import ConfigError
from leakshield.registry import Params


class IIDPartition(Params):
    """Shuffle and deal the samples evenly (sizes differ by at most one)."""

    kind: Literal["iid"] = "iid"


class DirichletPartition(Params):
    """Non-IID: for every class, client shares ~ Dirichlet(α·1) (Hsu et al., 2019). Small α → skewed."""

    kind: Literal["dirichlet"]
    alpha: float = pydantic.Field(default=0.5, gt=0)
    min_size: int = pydantic.Field(default=1, ge=0, description="redraw until every client has this many")


class ByClassPartition(Params):
    """Client i gets the samples of ``classes[i]`` (e.g. the GAN attack's two-client split). Clients
    that list the same classes share those samples, dealt evenly and disjointly (Anti-GAN Table 2: two
    groups of clients, each group holding one half of the classes)."""

    kind: Literal["by-class"]
    classes: list[list[int]]


class FixedSizePartition(Params):
    """Every client gets ``samples_per_client`` distinct samples drawn at random (the rest is unused)."""

    kind: Literal["fixed"]
    samples_per_client: int = pydantic.Field(gt=0)


PartitionConfig = Annotated[
    IIDPartition | DirichletPartition | ByClassPartition | FixedSizePartition,
    pydantic.Field(discriminator="kind"),
]


def partition_indices(
    labels: torch.Tensor, num_clients: int, config: Params, seed: int
) -> list[torch.Tensor]:
    """Indices of each client's samples; a pure function of its arguments."""
    if num_clients < 1:
        raise ConfigError(f"clients: must be at least 1, got {num_clients}")
    rng = np.random.default_rng(seed)
    y = labels.cpu().numpy()
    n = len(y)
    if isinstance(config, IIDPartition):
        parts = np.array_split(rng.permutation(n), num_clients)
    elif isinstance(config, FixedSizePartition):
        need = config.samples_per_client * num_clients
        if need > n:
            raise ConfigError(
                f"partition.samples_per_client: {num_clients} clients × {config.samples_per_client} "
                f"= {need} exceeds the {n} training samples"
            )
        parts = np.array_split(rng.permutation(n)[:need], num_clients)
    elif isinstance(config, ByClassPartition):
        if len(config.classes) != num_clients:
            raise ConfigError(
                f"partition.classes: {len(config.classes)} class lists for {num_clients} clients"
            )
        groups: dict[tuple[int, ...], list[int]] = {}
        for client, cls in enumerate(config.classes):
            groups.setdefault(tuple(sorted(set(cls))), []).append(client)
        parts = [np.empty(0, dtype=np.int64)] * num_clients
        for cls, members in groups.items():
            dealt = np.array_split(rng.permutation(np.flatnonzero(np.isin(y, cls))), len(members))
            for client, share in zip(members, dealt, strict=True):
                parts[client] = share
    elif isinstance(config, DirichletPartition):
        parts = _dirichlet(y, num_clients, config, rng)
    else:  # pragma: no cover - the union above is exhaustive
        raise ConfigError(f"partition.kind: unknown partition {config!r}")
    return [torch.from_numpy(np.sort(p)).long() for p in parts]


def _dirichlet(
    y: np.ndarray, num_clients: int, config: DirichletPartition, rng: np.random.Generator
) -> list[np.ndarray]:
    classes = np.unique(y)
    for _ in range(1000):
        buckets: list[list[int]] = [[] for _ in range(num_clients)]
        for cls in classes:
            idx = rng.permutation(np.flatnonzero(y == cls))
            shares = rng.dirichlet(np.full(num_clients, config.alpha))
            cuts = (np.cumsum(shares)[:-1] * len(idx)).astype(int)
            for client, chunk in enumerate(np.split(idx, cuts)):
                buckets[client].extend(chunk.tolist())
        if min(len(b) for b in buckets) >= config.min_size:
            return [np.array(b, dtype=np.int64) for b in buckets]
    raise ConfigError(
        f"partition.min_size: no Dirichlet(α={config.alpha}) draw gave every one of {num_clients} "
        f"clients {config.min_size} samples in 1000 tries; lower min_size or raise alpha"
    )
