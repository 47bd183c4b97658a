"""Canary clients (Andrew et al., *One-shot Empirical Privacy Estimation for Federated Learning*, ICLR
2024, §3): clients that hold no data and, whenever sampled, send a fixed random direction c_i scaled to
the round's clip bound S — an update the clipping leaves whole, so the noise alone must hide it.

Each canary joins the population by a fair coin (``included``), drawn before training: the one-run audit
of Steinke, Nasr & Jagielski (NeurIPS 2023) needs independent inclusions of probability ½, and the
excluded half are the held-out canaries the inserted half is compared with."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from leakshield.crossdevice.models import Params


def flat(params: Params) -> torch.Tensor:
    """All entries of ``params`` in one vector (the dict's order)."""
    return torch.cat([t.reshape(-1) for t in params.values()])


@dataclass(frozen=True)
class CanaryClients:
    """directions: (m, d) unit rows, one per canary, in the order of :func:`flat`; included: (m,) bool,
    which canaries are clients of the federation (ids N + i, after the N real clients)."""

    directions: torch.Tensor
    included: torch.Tensor

    @classmethod
    def draw(cls, count: int, dim: int, seed: int) -> CanaryClients:
        """``count`` directions uniform on the unit sphere of R^dim and a fair coin for each."""
        if count < 2:
            raise ValueError(f"canaries: {count}; at least 2 (half are held out)")
        g = torch.Generator().manual_seed(seed)
        directions = torch.randn(count, dim, generator=g, dtype=torch.float64)
        directions = (directions / directions.norm(dim=1, keepdim=True)).float()
        return cls(directions, torch.rand(count, generator=g) < 0.5)

    @property
    def count(self) -> int:
        """m, the canaries drawn (inserted and held out)."""
        return int(self.directions.shape[0])

    @functools.cached_property
    def _directions64(self) -> np.ndarray:
        return self.directions.double().numpy()

    def cosines(self, vector: np.ndarray) -> np.ndarray:
        """The cosine of ``vector`` (entries in the order of :func:`flat`) with every canary direction."""
        v = np.asarray(vector, dtype=np.float64)
        return self._directions64 @ v / max(float(np.linalg.norm(v)), 1e-300)

    def updates(self, ids: torch.Tensor, bound: float, like: Params) -> Params:
        """The updates canaries ``ids`` (0-based canary indices) send: bound·c_i, shaped like ``like``
        with a leading client dimension."""
        rows = self.directions[ids.cpu()].to(next(iter(like.values())).device) * bound
        out: Params = {}
        start = 0
        for name, t in like.items():
            out[name] = rows[:, start : start + t.numel()].reshape(len(ids), *t.shape)
            start += t.numel()
        if start != rows.shape[1]:
            raise ValueError(f"canaries have {rows.shape[1]} entries; the model has {start}")
        return out
