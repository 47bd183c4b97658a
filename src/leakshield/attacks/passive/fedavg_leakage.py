"""The FedAvg attack of Dimitrov et al. ("Data Leakage in Federated Averaging", TMLR 2022): simulate the
client's local epochs with one copy of the dummy batch per epoch, tied by an epoch-order-invariant prior.

A FedAvg client steps through its data for E epochs, in an order (and so in minibatches) the server does
not know. Unrolling the local steps over one dummy batch in a fixed order (leakshield's ``ig`` on a FedAvg
update, Inverting Gradients Sec. 5) forces every epoch's minibatches to the attacker's guess. Here epoch
e steps through its own copy x⁽ᵉ⁾ of the N images, free to take the client's order, and the prior

    R_inv = 1/E² · Σ_{e,e′} mean((agg_i f(x⁽ᵉ⁾_i) − agg_i f(x⁽ᵉ′⁾_i))²)

says that every epoch holds the same images whatever their order: agg is the mean over the epoch's
images and f the identity (the reference code's ``l2_mean`` prior, FEMNIST, weight 1,000) or a fixed
random 3×3 convolution of 96 channels with an element-wise max as agg (``l2_max_conv``, CIFAR-100,
weight 6.075). The update is matched as the reference matches it: 2·||Δθ'/lr − Δθ/lr||² / T over the
T local steps (squared L2 on the summed local gradients; the reference's factor ramps from 1 to 2, here
its final 2). A clip prior Σ mean_batch (x̃ − clip(x̃, 0, 1))² on the pixel images keeps them valid.
The reconstruction: every epoch's copy matched to epoch 0's by the assignment of highest PSNR
(Hungarian), then the E copies averaged.

Epoch copies only exist where the client's order is secret: it shuffled and ran more than one
minibatch per epoch. Otherwise every epoch sees the same minibatches in the same order, the true copies
are identical, and one copy is optimized (the reference's ``full`` mode); on a FedSGD update (E = 1)
it is L2 gradient matching with the clip prior. A reconstruction's ``grad_distance`` stat is this
scaled distance over the copies (not comparable with other attacks'). Parameters:
:class:`FedAvgLeakageParams`.
"""

from __future__ import annotations

from typing import Literal

import pydantic
import torch
from scipy.optimize import linear_sum_assignment

from leakshield.attacks.base import ATTACKS
from leakshield.attacks.passive.inversion.engine import GradientInversion, GradientInversionParams
from leakshield.attacks.passive.inversion.objectives import DISTANCES, Distance
from leakshield.fl.types import ServerView
from leakshield.threats import OBSERVER


class FedAvgLeakageParams(GradientInversionParams):
    """The epoch prior and clip prior on top of the engine's parameters (defaults: the reference code's
    FEMNIST settings where leakshield's engine has the part; 400 Adam steps)."""

    epoch_prior: float = pydantic.Field(
        default=1000.0, ge=0, description="weight of the epoch-order-invariant prior R_inv (0: off)"
    )
    epoch_features: Literal["mean", "max-conv"] = pydantic.Field(
        default="mean",
        description="R_inv's f and agg: mean (identity, mean over the epoch; FEMNIST, weight 1,000) or "
        "max-conv (a fixed random 3×3 convolution to 96 channels, max over the epoch; CIFAR-100, 6.075)",
    )
    clip: float = pydantic.Field(
        default=2.0, ge=0, description="weight of the clip prior on pixels outside [0, 1] (0: off)"
    )
    matching_factor: float = pydantic.Field(
        default=2.0, gt=0, description="the update distance's factor (the reference's ramp ends at 2)"
    )
    distance: Literal["l2", "l1", "cosine"] = pydantic.Field(default="l2", description="update distance")
    optimizer: Literal["adam", "sgd"] = pydantic.Field(default="adam", description="adam or sgd")
    lr: float = pydantic.Field(
        default=0.4, gt=0, description="step size (the reference: 0.4 on FEMNIST, 0.1 on CIFAR-100)"
    )
    iterations: int = pydantic.Field(default=400, ge=1, description="steps (the reference code's 400)")
    lr_schedule: Literal["none", "milestones", "cosine"] = pydantic.Field(
        default="cosine", description="decay of the step size (the reference decays it exponentially)"
    )
    tv: float = pydantic.Field(default=1e-3, ge=0, description="weight of the total-variation prior")
    tolerance: float = pydantic.Field(default=0.0, ge=0, description="stop below this distance (0: never)")

    @pydantic.field_validator("labels")
    @classmethod
    def _no_joint_labels(cls, value: str) -> str:
        if value == "joint":
            raise ValueError("'joint'; the FedAvg attack tiles one label vector over its epochs: known, "
                             "infer, bias or auto")  # fmt: skip
        return value


def copies_of(view: ServerView) -> int:
    """How many copies of the batch the attack optimizes: one per local epoch where the client's
    minibatch order is secret (it shuffled, more than one minibatch per epoch), else 1."""
    facts = view.update.protocol
    secret = facts.algorithm == "fedavg" and facts.shuffled and facts.batch_size < view.batch_size
    return facts.local_epochs if secret else 1


def epoch_order_prior(x: torch.Tensor, epochs: int, features: torch.nn.Module | None = None) -> torch.Tensor:
    """R_inv of ``x`` (E·N images, epoch-major): 1/E²·Σ_{e,e′} mean((agg f(x⁽ᵉ⁾) − agg f(x⁽ᵉ′⁾))²), agg the
    mean over an epoch's images (``features`` None, f the identity) or the max of ``features``' output."""
    per_epoch = x.reshape(epochs, -1, *x.shape[1:])
    if features is None:
        summary = per_epoch.mean(dim=1)
    else:
        mapped = features(x)
        summary = mapped.reshape(epochs, -1, *mapped.shape[1:]).amax(dim=1)
    flat = summary.reshape(epochs, -1)
    return (flat[:, None, :] - flat[None, :, :]).pow(2).mean(dim=-1).sum() / epochs**2


def merge_epochs(images: torch.Tensor, epochs: int) -> torch.Tensor:
    """The batch from E copies (E·N pixel images in [0, 1], epoch-major): each copy matched to copy 0 by
    the assignment of highest total PSNR, then the matched images averaged."""
    copies = images.reshape(epochs, -1, *images.shape[1:])
    reference, merged = copies[0], [copies[0]]
    for other in copies[1:]:
        mse = (reference[:, None] - other[None, :]).pow(2).flatten(2).mean(dim=-1)
        psnr = -10 * torch.log10(mse.clamp_min(1e-10))
        rows, columns = linear_sum_assignment(psnr.detach().cpu().numpy(), maximize=True)
        merged.append(other[torch.as_tensor(columns[rows.argsort()], device=other.device)])
    return torch.stack(merged).mean(dim=0)


class FedAvgLeakage(GradientInversion):
    """The FedAvg attack of Dimitrov et al. (TMLR 2022): one dummy copy of the batch per local epoch,
    an epoch-order-invariant prior, copies matched and averaged (module docstring). Parameters:
    :class:`FedAvgLeakageParams`."""

    params: FedAvgLeakageParams

    def _distance(self, view: ServerView) -> Distance:
        """The update distance on Δθ / lr (the sum of the local gradients), times ``matching_factor`` / T
        over the T local steps, as the reference matches it."""
        facts = view.update.protocol
        plain = DISTANCES[self.params.distance]
        scale = facts.local_lr if facts.algorithm == "fedavg" else 1.0
        factor = self.params.matching_factor / max(facts.local_steps, 1)

        def distance(dummy, target, weights=None):  # type: ignore[no-untyped-def]
            return factor * plain([d / scale for d in dummy], [t / scale for t in target], weights)

        return distance

    def _dummy_count(self, view: ServerView) -> int:
        return view.batch_size * copies_of(view)

    def _prior(self, x: torch.Tensor, view: ServerView) -> torch.Tensor | None:
        p, epochs = self.params, copies_of(view)
        total = None
        if p.clip:
            pixels = view.data_info.denormalize(x)
            total = p.clip * (pixels - pixels.clamp(0, 1)).pow(2).mean(dim=0).sum()
        if p.epoch_prior and epochs > 1:
            prior = p.epoch_prior * epoch_order_prior(x, epochs, self._epoch_features(x))
            total = prior if total is None else total + prior
        return total

    def _epoch_features(self, x: torch.Tensor) -> torch.nn.Module | None:
        """R_inv's f: None (the identity) or the fixed random convolution, drawn once per attack from a
        generator seeded 0 (the reference draws one per attacked client)."""
        if self.params.epoch_features == "mean":
            return None
        cached = getattr(self, "_conv", None)
        if cached is None or cached.in_channels != x.shape[1] or cached.weight.device != x.device:
            gen = torch.Generator().manual_seed(0)
            conv = torch.nn.Conv2d(x.shape[1], 96, 3, padding=1, bias=False)
            bound = (1.0 / (x.shape[1] * 9)) ** 0.5  # LeCun normal's scale
            with torch.no_grad():
                conv.weight.copy_(torch.randn(conv.weight.shape, generator=gen) * bound)
            cached = conv.to(x.device).requires_grad_(False)
            self._conv = cached
        return cached

    def _merged(self, x: torch.Tensor, view: ServerView) -> torch.Tensor:
        epochs = copies_of(view)
        if epochs == 1:
            return x
        info = view.data_info
        return info.normalize(merge_epochs(info.denormalize(x).clamp(0, 1), epochs))


__all__ = ["FedAvgLeakage", "FedAvgLeakageParams", "epoch_order_prior", "merge_epochs"]

ATTACKS.register(
    "fedavg-leakage",
    summary="FedAvg attack: one dummy copy per local epoch tied by an epoch-order-invariant prior "
    "(weight 1,000), squared-L2 update matching, clip prior, copies matched and averaged; 400 Adam steps",
    reference="Dimitrov et al., Data Leakage in Federated Averaging, TMLR 2022 (eth-sri/fedavg_leakage)",
    params=FedAvgLeakageParams,
    threat=OBSERVER,
)(FedAvgLeakage)
