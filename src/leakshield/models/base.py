"""The shape every leakshield model shares: ``features`` (input → flat vector) then ``classifier``.

Defenses that act on "the layer before the classifier" (PRECODE, Soteria, dropout) find it generically
through these two attributes instead of per-architecture code.
"""

from __future__ import annotations

import torch
from torch import nn


class FeatureClassifier(nn.Module):
    """``forward(x) = classifier(features(x))``; ``features`` ends with a flat (N, d) output."""

    def __init__(self, features: nn.Module, classifier: nn.Linear) -> None:
        super().__init__()
        self.features = features
        self.classifier = classifier

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))

    @property
    def feature_dim(self) -> int:
        return self.classifier.in_features


def is_stochastic(model: nn.Module) -> bool:
    """Whether ``model`` contains a layer that samples on every forward (marked ``stochastic = True``,
    e.g. the dropout defense's layer or PRECODE's bottleneck)."""
    return any(getattr(m, "stochastic", False) for m in model.modules())


def auxiliary_loss(model: nn.Module) -> torch.Tensor | float:
    """The extra loss terms that layers of ``model`` computed in their latest forward (e.g. PRECODE's
    β·KL, Eq. 3), summed, and cleared so that a term is counted once; 0 when there are none.

    Layers take part by defining ``pop_auxiliary_loss() -> Tensor | None``. Every loss a client or an
    attacker differentiates is ``task loss + auxiliary_loss(model)`` read right after the forward
    (:func:`leakshield.loss.training_loss`)."""
    total: torch.Tensor | float = 0.0
    for module in model.modules():
        pop = getattr(module, "pop_auxiliary_loss", None)
        if pop is not None:
            term = pop()
            if term is not None:
                total = total + term
    return total


def flat_size(module: nn.Module, in_shape: tuple[int, int, int]) -> int:
    """Number of features ``module`` outputs for one input of ``in_shape`` (dry run, no grad)."""
    with torch.no_grad():
        was_training = module.training
        module.eval()
        out = module(torch.zeros(1, *in_shape))
        module.train(was_training)
    return int(out.flatten(1).shape[1])
