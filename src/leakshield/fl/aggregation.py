"""Aggregators: how the server combines the replies of a round into one step of the global model.

``mean`` is FedSGD's and FedAvg's weighted mean (McMahan et al., AISTATS 2017): weights proportional
to each client's sample count. ``median`` is the coordinate-wise median of Yin et al. (*Byzantine-
Robust Distributed Learning*, ICML 2018), a robust aggregator that bounds what one malicious
participant can move. Registered like every other component (``fl.aggregator`` in a config)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from leakshield.fl.types import ClientUpdate
from leakshield.registry import Params, Registry


class Aggregator:
    """Combines updates into one parameter step (same keys as ``delta``) and the new buffers."""

    name: str = "aggregator"

    def __init__(self, params: Params) -> None:
        self.params = params

    def combine(self, updates: Sequence[ClientUpdate]) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def buffers(self, updates: Sequence[ClientUpdate]) -> dict[str, torch.Tensor]:
        """The clients' buffers (BatchNorm statistics) combined: the sample-weighted mean of floating
        buffers, the first client's integer buffers (counters); empty when clients report none."""
        if not updates or not updates[0].buffers:
            return {}
        weights = sample_weights(updates)
        out = {}
        for name, first in updates[0].buffers.items():
            if first.is_floating_point():
                out[name] = sum(w * u.buffers[name] for w, u in zip(weights, updates, strict=True))
            else:
                out[name] = first
        return out  # type: ignore[return-value]


AGGREGATORS: Registry[Aggregator] = Registry("aggregator")


def sample_weights(updates: Sequence[ClientUpdate]) -> list[float]:
    total = sum(u.protocol.num_samples for u in updates)
    return [u.protocol.num_samples / total for u in updates]


@AGGREGATORS.register(
    "mean",
    summary="sample-weighted mean of the updates (FedSGD, FedAvg)",
    reference="McMahan et al., Communication-Efficient Learning of Deep Networks, AISTATS 2017",
)
class WeightedMean(Aggregator):
    def combine(self, updates: Sequence[ClientUpdate]) -> dict[str, torch.Tensor]:
        weights = sample_weights(updates)
        return {
            name: sum(w * u.delta[name] for w, u in zip(weights, updates, strict=True))  # type: ignore[misc]
            for name in updates[0].delta
        }


@AGGREGATORS.register(
    "median",
    summary="coordinate-wise median of the updates (robust to a minority of malicious participants)",
    reference="Yin et al., Byzantine-Robust Distributed Learning, ICML 2018",
)
class CoordinateMedian(Aggregator):
    def combine(self, updates: Sequence[ClientUpdate]) -> dict[str, torch.Tensor]:
        return {
            name: torch.stack([u.delta[name] for u in updates]).median(dim=0).values
            for name in updates[0].delta
        }


def create_aggregator(name: str) -> Aggregator:
    aggregator = AGGREGATORS.create(name)
    aggregator.name = AGGREGATORS.get(name).name
    return aggregator
