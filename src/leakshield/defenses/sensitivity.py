"""Which of a client's samples are sensitive (DCS², Wu et al., AAAI 2024: the user decides; the defense
protects those only). A rule is shared by the DCS² defense and by the report's accuracy on sensitive
samples, so every row of a comparison scores the same samples."""

from __future__ import annotations

from typing import Literal

import pydantic
import torch

from leakshield.data.types import ImageSet
from leakshield.errors import ConfigError
from leakshield.registry import Params


class SensitivityRule(Params):
    """sensitive: ``fraction`` (a seeded ``fraction`` of each client's samples, default 10 %),
    ``labels`` (every sample whose label is in ``labels``), ``all``, ``last-in-batch`` (the last
    ``per_batch`` items of every minibatch, the reference code's rule) or ``flagged`` (the per-sample
    flags the user put on the client's data, ``ImageSet.sensitive``). seed: the draw of the fraction."""

    sensitive: Literal["fraction", "labels", "all", "last-in-batch", "flagged"] = "fraction"
    fraction: float = pydantic.Field(default=0.1, gt=0, le=1)
    labels: list[int] = pydantic.Field(default_factory=list)
    per_batch: int = pydantic.Field(default=1, ge=1)
    seed: int = 0

    @pydantic.model_validator(mode="after")
    def _labels_for_label_rule(self) -> SensitivityRule:
        if self.sensitive == "labels" and not self.labels:
            raise ValueError("sensitive: 'labels' needs a non-empty labels list")
        return self


def content_scores(x: torch.Tensor, seed: int) -> torch.Tensor:
    """A seeded pseudo-random number in [0, 1) per image that depends on the image only (a hash of a
    random projection): the same sample gets the same score in every batch it appears in."""
    gen = torch.Generator().manual_seed(seed)
    direction = torch.randn(x[0].numel(), generator=gen, dtype=torch.float64).to(x.device)
    projection = x.flatten(1).double() @ direction
    return torch.frac(torch.sin(projection * 12.9898 + 78.233).abs() * 43758.5453)


class SensitiveSamples:
    """Applies a :class:`SensitivityRule`: :meth:`bind` the client's dataset once (the fraction rule
    ranks its samples), then :meth:`mask` any of its minibatches."""

    def __init__(self, rule: SensitivityRule) -> None:
        self.rule = rule
        self._threshold: float | None = None

    def bind(self, data: ImageSet) -> None:
        if self.rule.sensitive == "fraction" and len(data):
            scores = content_scores(data.x, self.rule.seed)
            k = max(1, round(self.rule.fraction * len(data)))
            self._threshold = float(scores.sort().values[k - 1])

    def mask(self, batch: ImageSet) -> torch.Tensor:
        """Which samples of ``batch`` are sensitive (bool, on the labels' device)."""
        rule = self.rule
        n, device = len(batch), batch.y.device
        if rule.sensitive == "all":
            return torch.ones(n, dtype=torch.bool, device=device)
        if rule.sensitive == "labels":
            return torch.isin(batch.y, torch.tensor(rule.labels, device=device))
        if rule.sensitive == "last-in-batch":
            mask = torch.zeros(n, dtype=torch.bool, device=device)
            mask[max(0, n - rule.per_batch) :] = True
            return mask
        if rule.sensitive == "flagged":
            if batch.sensitive is None:
                raise ConfigError("sensitive: 'flagged' but the client's data carries no flags")
            return batch.sensitive.to(device=device, dtype=torch.bool)
        if self._threshold is None:
            self.bind(batch)
        assert self._threshold is not None
        return content_scores(batch.x, rule.seed).to(device) <= self._threshold

    def of_dataset(self, data: ImageSet) -> torch.Tensor:
        """The mask of a whole client dataset (bound as the client's)."""
        self.bind(data)
        return self.mask(data)
