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


def flat_size(module: nn.Module, in_shape: tuple[int, int, int]) -> int:
    """Number of features ``module`` outputs for one input of ``in_shape`` (dry run, no grad)."""
    with torch.no_grad():
        was_training = module.training
        module.eval()
        out = module(torch.zeros(1, *in_shape))
        module.train(was_training)
    return int(out.flatten(1).shape[1])
