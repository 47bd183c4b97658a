"""The malicious-server imprint attack, "Robbing the Fed" (Fowl et al., ICLR 2022).

The server prepends an imprint block to the model it sends: Linear(N → k) with every row the same
linear query q (the average of the normalized pixels) and biases −t_i at k thresholds t_0 < … < t_{k−1}
placed at quantiles of the query's distribution over the server's public data, a ReLU, and
Linear(k → N) with all weights 1, so every active bin receives the same backpropagated signal δ(x).
A sample x activates exactly the bins with t_i < q·x (a cumulative layout), so for consecutive bins

    ∇W_i − ∇W_{i+1} = Σ_{x: t_i < q·x ≤ t_{i+1}} δ(x)·xᵀ,    ∇b_i − ∇b_{i+1} = Σ δ(x),

and a bin pair holding a single sample gives it back exactly: x = (∇W_i − ∇W_{i+1}) / (∇b_i − ∇b_{i+1}).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Literal

import pydantic
import torch
from torch import nn

from leakshield.attacks.base import ATTACKS, Attack, Reconstruction
from leakshield.attacks.passive.labels import granted_or_inferred_labels
from leakshield.data.types import DatasetInfo
from leakshield.fl.types import PreparedModel, ServerKnowledge, ServerSecrets, ServerView
from leakshield.imprint_bins import recover_from_bins
from leakshield.registry import Params
from leakshield.threats import Adversary, Knowledge, threat


class ImprintBlock(nn.Module):
    """Linear(N → k) + ReLU + Linear(k → N) with the imprint layout (see the module docstring)."""

    def __init__(self, size: int, thresholds: torch.Tensor) -> None:
        super().__init__()
        bins = len(thresholds)
        self.query = nn.Linear(size, bins)
        self.relu = nn.ReLU()
        self.spread = nn.Linear(bins, size)
        with torch.no_grad():
            self.query.weight.fill_(1.0 / size)
            self.query.bias.copy_(-thresholds)
            self.spread.weight.fill_(1.0)
            self.spread.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.spread(self.relu(self.query(x)))


class ImprintedModel(nn.Module):
    """``model`` behind an imprint block acting on the flattened input image."""

    def __init__(self, block: ImprintBlock, model: nn.Module) -> None:
        super().__init__()
        self.imprint = block
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(self.imprint(x.flatten(1)).view_as(x))


@dataclass(frozen=True)
class ImprintSecrets(ServerSecrets):
    """The thresholds the server placed (it reads the bins off the update; kept for inspection)."""

    thresholds: torch.Tensor


def pixel_images(inputs: torch.Tensor, info: DatasetInfo, count: int) -> torch.Tensor:
    """Recovered model inputs (normalized, one flattened image per row) as images in [0, 1] on the CPU,
    padded with mid-grey images to ``count`` when fewer samples were recovered."""
    images = info.denormalize(inputs.float().view(-1, *info.shape)).clamp(0, 1).cpu()
    if len(images) < count:
        images = torch.cat([images, torch.full((count - len(images), *info.shape), 0.5)])
    return images


class ImprintParams(Params):
    """bins: number of imprint bins (breaching: 64; DCS²: 10). fit: place thresholds at the empirical
    quantiles of the query over the public split, or at those of a Gaussian / Laplace fitted to it."""

    bins: int = pydantic.Field(default=64, ge=2)
    fit: Literal["empirical", "gaussian", "laplace"] = "empirical"


@ATTACKS.register(
    "imprint",
    summary="malicious server: imprint block (linear query, quantile bins, cumulative layout) recovers "
    "single images from a whole batch's gradient",
    reference="Fowl et al., Robbing the Fed, ICLR 2022",
    params=ImprintParams,
    threat=threat(Adversary.ARCHITECTURE_SERVER, (Knowledge.PROTOCOL, Knowledge.PUBLIC_SPLIT)),
)
class ImprintAttack(Attack):
    """Needs FedSGD (or a one-step update); labels, when not granted, come from the batch rule."""

    params: ImprintParams

    def prepare_model(self, model: nn.Module, knowledge: ServerKnowledge) -> PreparedModel:
        info = knowledge.data_info
        queries = info.normalize(knowledge.public.x).flatten(1).mean(dim=1).double()
        thresholds = self._thresholds(queries).float()
        block = ImprintBlock(math.prod(info.shape), thresholds)
        device = next(model.parameters()).device
        return PreparedModel(ImprintedModel(block, model).to(device), ImprintSecrets(thresholds.clone()))

    def _thresholds(self, queries: torch.Tensor) -> torch.Tensor:
        k = self.params.bins
        levels = torch.arange(k, dtype=torch.float64) / k  # bin i holds queries in [F⁻¹(i/k), F⁻¹((i+1)/k))
        if self.params.fit == "empirical":
            cuts = torch.quantile(queries, levels.clamp(1e-6, 1 - 1e-6))
        else:
            mu, sigma = float(queries.mean()), float(queries.std())
            if self.params.fit == "gaussian":
                dist = statistics.NormalDist(mu, sigma)
                cuts = torch.tensor([dist.inv_cdf(float(p)) if p > 0 else -math.inf for p in levels])
            else:  # Laplace with the same mean and standard deviation
                b = sigma / math.sqrt(2)
                cuts = torch.tensor(
                    [
                        mu + (b * math.log(2 * p) if p < 0.5 else -b * math.log(2 - 2 * p))
                        if p > 0
                        else -math.inf
                        for p in levels.tolist()
                    ]
                )
        cuts[0] = queries.min() - 10 * (queries.std() + 1)  # the first bin catches everything
        return cuts

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction:
        start = time.perf_counter()
        if not isinstance(view.model, ImprintedModel):
            raise ValueError("the imprint attack needs the model it prepared (prepare_model)")
        info = view.data_info
        gradient = view.update.gradient()
        images, hits = recover_from_bins(
            gradient["imprint.query.weight"], gradient["imprint.query.bias"], view.batch_size
        )
        images = pixel_images(images, info, view.batch_size)  # fewer occupied bins than samples: padded
        labels = granted_or_inferred_labels(view)
        stats = {"bins_hit": float(hits), "seconds": time.perf_counter() - start}
        if isinstance(view.secrets, ImprintSecrets):
            stats["bins"] = float(len(view.secrets.thresholds))
        return Reconstruction(images=images, labels=labels.cpu(), stats=stats)
