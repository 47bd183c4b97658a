"""Trap weights (Boenisch et al., *When the Curious Abandon Honesty: Federated Learning Is Not
Private*, IEEE EuroS&P 2023): a malicious server rewrites the first fully connected layer's weights so
that each of its ReLU neurons fires for very few inputs; a neuron fired by a single sample x gives it
back exactly from the shared gradient, x = ∇W_i / ∇b_i, however many samples (and, under secure
aggregation, however many clients' samples) the update sums.

The paper's recipe: draw each row at random and scale its negative entries by a factor s > 1, so that
w·x < 0 for most images x ≥ 0. leakshield calibrates s per row on the public split so that each
neuron fires for a share ``activation_rate`` of images (the paper tunes s by hand per dataset), and
folds the input normalization into the layer (the neuron computes w·x on pixels in [0, 1], as the paper
assumes). Extraction: every neuron with a non-zero bias gradient yields a candidate; a sample that
fired several neurons alone appears several times (near-identical candidates), mixtures do not, so
candidates are grouped by cosine similarity and the largest groups are returned first.

Parameters: ``activation_rate``: share of public images each neuron fires for (≈ 1 / the number of
samples in the update keeps most neurons to one sample); ``seed``: the random rows; ``group_cosine``:
similarity at which two candidates are the same sample.
"""

from __future__ import annotations

import copy
import math
import time

import pydantic
import torch
from torch import nn

from leakshield.attacks.active.imprint import pixel_images
from leakshield.attacks.base import ATTACKS, Attack, Reconstruction
from leakshield.attacks.passive.analytic import first_linear_fed_by_image
from leakshield.attacks.passive.labels import granted_or_inferred_labels
from leakshield.data.types import DatasetInfo
from leakshield.errors import ConfigError
from leakshield.fl.types import PreparedModel, ServerKnowledge, ServerView
from leakshield.registry import Params
from leakshield.threats import Adversary, Knowledge, threat


class TrapWeightsParams(Params):
    """activation_rate: share of public images each trap neuron fires for. seed: the random rows.
    group_cosine: cosine similarity at which two extracted candidates count as the same sample."""

    activation_rate: float = pydantic.Field(default=0.02, gt=0, lt=1)
    seed: int = 0
    group_cosine: float = pydantic.Field(default=0.999, gt=0, le=1)


def first_image_layer(
    model: nn.Module, info: DatasetInfo, attack: str = "trap-weights"
) -> tuple[str, nn.Linear]:
    """The first fully connected layer fed by the flattened image (qualified name, module), found as the
    analytic attack finds it (:func:`~leakshield.attacks.passive.analytic.first_linear_fed_by_image`, whose
    probe leaves the global random stream as it was); else a :class:`ConfigError` naming ``attack``."""
    try:
        name = first_linear_fed_by_image(model, info.shape)
    except ValueError:
        raise ConfigError(
            f"{attack}: the model's first layer must be fully connected on the flattened image (e.g. mlp)"
        ) from None
    return name, model.get_submodule(name)  # type: ignore[return-value]


def check_image_fed_linear(model: nn.Module, shape: tuple[int, int, int]) -> None:
    """Refuse (:class:`ValueError`, the reason) a model none of whose fully connected layers reads the
    flattened image: the attacks on such a layer (trap weights, Cocktail Party) cannot work on it."""
    try:
        first_linear_fed_by_image(model, shape)
    except ValueError:
        raise ValueError(
            "its first layer must be fully connected on the flattened image (e.g. mlp), and no fully "
            "connected layer of this model reads the image"
        ) from None


def trap_rows(
    public: torch.Tensor, width: int, rate: float, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows w (width × N, pixel space) whose negative entries are scaled per row so that w·x > 0 for a
    share ``rate`` of the ``public`` images (N-dimensional, in [0, 1]): s = the (1 − rate) quantile of
    (w⁺·x) / (w⁻·x). Returns the rows and each row's scale."""
    rows = torch.randn(width, public.shape[1], generator=generator, dtype=torch.float64)
    positive, negative = rows.clamp_min(0), (-rows).clamp_min(0)
    ratio = (public @ positive.T) / (public @ negative.T).clamp_min(1e-12)  # images × rows
    scale = torch.quantile(ratio, 1 - rate, dim=0).clamp_min(1e-6)
    return positive - scale[:, None] * negative, scale


@ATTACKS.register(
    "trap-weights",
    summary="malicious server: trap weights in the first fully connected layer make each neuron fire for "
    "one sample, recovered exactly from a large batch or an aggregate",
    reference="Boenisch et al., When the Curious Abandon Honesty: Federated Learning Is Not Private, "
    "IEEE EuroS&P 2023",
    params=TrapWeightsParams,
    threat=threat(
        Adversary.PARAMETER_SERVER, (Knowledge.PROTOCOL, Knowledge.PUBLIC_SPLIT), secure_aggregation=True
    ),
)
class TrapWeightsAttack(Attack):
    """Needs FedSGD (or a one-step update) and a model whose first layer is fully connected (mlp)."""

    params: TrapWeightsParams

    def check_model(self, model: nn.Module, shape: tuple[int, int, int]) -> None:
        """Refuse, before a run, a model it cannot attack (:func:`check_image_fed_linear`)."""
        check_image_fed_linear(model, shape)

    def prepare_model(self, model: nn.Module, knowledge: ServerKnowledge) -> PreparedModel:
        info = knowledge.data_info
        sent = copy.deepcopy(model)
        _, layer = first_image_layer(sent, info)
        public = knowledge.public.x.flatten(1).double().cpu()
        generator = torch.Generator().manual_seed(self.params.seed)
        rows, _ = trap_rows(public, layer.out_features, self.params.activation_rate, generator)
        # the layer reads normalized pixels z = (x − μ)/σ: w·x = (w σ)·z + w·μ
        mean = torch.tensor(info.mean, dtype=torch.float64).repeat_interleave(math.prod(info.shape[1:]))
        std = torch.tensor(info.std, dtype=torch.float64).repeat_interleave(math.prod(info.shape[1:]))
        with torch.no_grad():
            layer.weight.copy_((rows * std).to(layer.weight))
            if layer.bias is None:
                raise ConfigError("trap-weights: the first fully connected layer needs a bias")
            layer.bias.copy_((rows @ mean).to(layer.bias))
        return PreparedModel(sent)

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction:
        start = time.perf_counter()
        info = view.data_info
        name, _ = first_image_layer(view.model, info)
        gradient = view.update.gradient()
        grad_w, grad_b = gradient[f"{name}.weight"].double(), gradient[f"{name}.bias"].double()
        live = grad_b.abs() > 1e-9 * grad_b.abs().max().clamp_min(1e-30)
        candidates = grad_w[live] / grad_b[live, None]
        picked = self._distinct_samples(candidates, view.batch_size)
        images = pixel_images(picked, info, view.batch_size)
        labels = granted_or_inferred_labels(view)
        stats = {"neurons_fired": float(live.sum()), "samples_found": float(len(picked)),
                 "seconds": time.perf_counter() - start}  # fmt: skip
        return Reconstruction(images=images, labels=labels.cpu(), stats=stats)

    def _distinct_samples(self, candidates: torch.Tensor, limit: int) -> torch.Tensor:
        """Representatives of groups of near-identical candidates, the largest groups first."""
        if len(candidates) == 0:
            return candidates
        unit = candidates / candidates.norm(dim=1, keepdim=True).clamp_min(1e-12)
        same = (unit @ unit.T) >= self.params.group_cosine
        free = torch.ones(len(candidates), dtype=torch.bool)
        chosen = []
        while free.any() and len(chosen) < limit:
            sizes = (same & free[None, :]).sum(dim=1) * free  # group size of each free candidate
            best = int(sizes.argmax())
            chosen.append(best)
            free &= ~same[best]
        return candidates[chosen]
