"""The public gradient-matching problem: what an optimization attack exposes to the paths that solve
it for many victims at once (:mod:`.many`, :mod:`.shards`) and to attacks built on the same matching
(GGL), instead of the engine's private parts; and the matching helpers they share."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from typing import Protocol

import torch
from torch import nn

from leakshield.attacks.base import Reconstruction
from leakshield.attacks.execution import Execution
from leakshield.attacks.passive.inversion.params import GradientInversionParams
from leakshield.data.types import DatasetInfo
from leakshield.errors import ConfigError
from leakshield.fl.types import ServerView
from leakshield.models.base import is_stochastic


class MatchingProblem(Protocol):
    """A gradient-matching attack as its many-victim paths see it: its parameters and name, how it
    resolves labels, which parameters it matches and with what weight, the box its images live in,
    its start, its one-victim solution, its loop over victims, and a copy with other parameters."""

    params: GradientInversionParams
    execution: Execution
    name: str

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction: ...

    def labels_for(self, view: ServerView, device: torch.device) -> tuple[torch.Tensor | None, str]: ...

    def matched(self, model: nn.Module, view: ServerView) -> list[str]: ...

    def weight_of(self, name: str) -> float: ...

    def box(self, info: DatasetInfo, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]: ...

    def start(self, n: int, info: DatasetInfo, gen: torch.Generator) -> torch.Tensor: ...

    def one_by_one(
        self, views: Sequence[ServerView], seeds: Sequence[int], progress: bool
    ) -> list[Reconstruction]: ...

    def with_params(self, **update: object) -> MatchingProblem: ...

    def with_execution(self, **update: object) -> MatchingProblem: ...

    def reconstruct_many(
        self, views: Sequence[ServerView], *, seeds: Sequence[int], progress: bool = False
    ) -> list[Reconstruction]: ...


def one_fedsgd_round(views: Sequence[ServerView]) -> bool:
    """Whether ``views`` are FedSGD gradients of equal batch size on one deterministic eval-mode model
    (the same weights): the condition for advancing their attacks in one vectorized step."""
    first = views[0]
    if is_stochastic(first.model):
        return False
    if any(v.update.protocol.algorithm != "fedsgd" or v.model.training for v in views):
        return False
    if any(v.batch_size != first.batch_size for v in views):
        return False
    reference = first.model.state_dict()
    return all(all(torch.equal(t, reference[k]) for k, t in v.model.state_dict().items()) for v in views[1:])


def layer_weight(name: str, weights: dict[str, float]) -> float:
    """The matching weight of parameter ``name``: the first glob pattern of ``weights`` it matches, else 1."""
    for pattern, weight in weights.items():
        if fnmatch.fnmatchcase(name, pattern):
            return float(weight)
    return 1.0


def matched_names(
    model: nn.Module, view: ServerView, patterns: list[str] | None, weights: dict[str, float]
) -> list[str]:
    """The parameters an attack matches: in the update, selected by ``patterns`` (all if None), weight > 0."""
    names = [name for name, _ in model.named_parameters() if name in view.update.delta]
    if patterns is not None:
        names = [n for n in names if any(fnmatch.fnmatchcase(n, pat) for pat in patterns)]
    names = [n for n in names if layer_weight(n, weights) > 0]
    if not names:
        raise ConfigError("parameters/layer_weights: no parameter of the model is left to match")
    return names
