"""Which of a client's samples are sensitive (DCS², Wu et al., AAAI 2024: the user decides; a defense
may protect those only). A rule is shared by the defenses that use one, by the victim draw
(``victims.sensitive``) and by the accuracy on sensitive samples (``metrics.sensitive``), so every row
of a comparison scores the same samples. Applying a rule is a pure function of the minibatch and the
client's whole dataset (the fraction rule ranks it): nothing is bound between calls."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import pydantic
import torch

from leakshield.data.types import ImageSet
from leakshield.errors import ConfigError
from leakshield.registry import Params


class SensitivityRule(Params):
    """sensitive: ``fraction`` (a seeded ``fraction`` of each client's samples), ``labels`` (every sample
    whose label is in ``labels``), ``all``, ``last-in-batch`` (the last ``per_batch`` items of every
    minibatch, the reference code's rule) or ``flagged`` (the per-sample flags the user put on the client's
    data, ``ImageSet.sensitive``). fraction: the share of sensitive samples (default 10 %). labels: the
    sensitive labels. per_batch: sensitive items at the end of every minibatch. seed: the draw of the
    fraction."""

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
    """Applies a :class:`SensitivityRule` to minibatches of one client's dataset."""

    def __init__(self, rule: SensitivityRule) -> None:
        self.rule = rule

    def threshold(self, dataset: ImageSet) -> float | None:
        """The fraction rule's score threshold over the client's ``dataset`` (None for other rules)."""
        if self.rule.sensitive != "fraction" or not len(dataset):
            return None
        scores = content_scores(dataset.x, self.rule.seed)
        k = max(1, round(self.rule.fraction * len(dataset)))
        return float(scores.sort().values[k - 1])

    def mask(self, batch: ImageSet, dataset: ImageSet | None = None) -> torch.Tensor:
        """Which samples of ``batch`` (a minibatch of the client's ``dataset``, default: the batch itself)
        are sensitive (bool, on the labels' device)."""
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
        threshold = self.threshold(dataset if dataset is not None else batch)
        if threshold is None:
            return torch.zeros(n, dtype=torch.bool, device=device)
        return content_scores(batch.x, rule.seed).to(device) <= threshold

    def of_dataset(self, data: ImageSet) -> torch.Tensor:
        """The mask of a whole client dataset."""
        return self.mask(data, data)


def sensitive_subset(
    datasets: Sequence[ImageSet],
    rule: SensitivityRule | None,
    fallback: Callable[[ImageSet], torch.Tensor | None] | None = None,
) -> ImageSet | None:
    """The sensitive samples of ``datasets`` (each a client's dataset) pooled: by ``rule``, else by
    ``fallback`` (a defense's own rule, e.g. DCS²'s); None when neither defines them for every dataset.
    The accuracy on these samples is DCS² Table 1's "accuracy on sensitive samples"."""
    parts = []
    for data in datasets:
        if rule is not None:
            mask = SensitiveSamples(rule).of_dataset(data)
        else:
            mask = fallback(data) if fallback is not None else None
        if mask is None:
            return None
        parts.append(data.subset(mask.nonzero().flatten()))
    if not parts:
        return None
    return ImageSet(torch.cat([p.x for p in parts]), torch.cat([p.y for p in parts]))
