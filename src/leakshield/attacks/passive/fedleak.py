"""FedLeak (Fan et al., "Boosting Gradient Leakage Attacks: Data Reconstruction in Realistic FL
Settings", USENIX Security 2025): gradient matching built for large batches, with two changes to
Inverting Gradients' recipe.

* **Partial gradient matching.** Per parameter tensor only the entries where the dummy gradient is
  largest are compared — those with |∇θ'| at or above the tensor's ``1 − keep_fraction`` quantile (the
  released code keeps half) — by mean |g − g'| + 1 − cos(g, g'), both gradients zeroed outside the kept
  entries (the mean runs over all entries, as in the released code), summed over tensors. The intent, as we
  read it: at a large batch the dummy gradient's small entries are the ones it cannot yet explain, and
  matching them early pulls every image towards the batch's average.
* **Gradient regularization.** Each step moves along a blend of the signed image gradient here and
  at a look-ahead point one signed step of ρ further, (1 − λ)·sign g(x) + λ·sign g(x − ρ·sign g(x)) with
  λ = ``regularization`` (0.3 in the released code), which damps the steps that a sharp, single-point
  gradient would take. ρ starts at ``lookahead`` and decays with the step size's schedule (the released
  code's look-ahead is one step of its own optimizer); the look-ahead point stays in the pixel box.

leakshield optimizes the pixels, as Inverting Gradients does; the released code optimizes a randomly
initialized image generator instead (a deep image prior at 128 px, 10,000 steps). On FedAvg updates the
client's local steps are unrolled as for every gradient-matching attack. A reconstruction's
``grad_distance`` stat is FedLeak's own partial distance (not comparable with other attacks'). Parameters:
:class:`FedLeakParams`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import pydantic
import torch

from leakshield.attacks.base import ATTACKS
from leakshield.attacks.passive.inversion.engine import GradientInversion, GradientInversionParams
from leakshield.attacks.passive.inversion.loops import Objective, lr_scheduler
from leakshield.attacks.passive.inversion.objectives import Distance
from leakshield.errors import ConfigError
from leakshield.fl.types import ServerView
from leakshield.threats import OBSERVER


class FedLeakParams(GradientInversionParams):
    """FedLeak's matching and step on top of the engine's parameters (``distance`` is ignored: FedLeak
    matches by its own; ``signed`` must stay false: its step is already a blend of signed gradients)."""

    keep_fraction: float = pydantic.Field(
        default=0.5,
        gt=0,
        le=1,
        description="partial matching: the fraction of each tensor's entries compared, those where the "
        "dummy gradient is largest (1: all, the plain L1 − cosine distance)",
    )
    regularization: float = pydantic.Field(
        default=0.3,
        ge=0,
        lt=1,
        description="λ: the weight of the look-ahead point's signed gradient (0: off)",
    )
    lookahead: float = pydantic.Field(
        default=0.1, gt=0, description="ρ: the signed step (normalized pixels) to the look-ahead point"
    )
    optimizer: Literal["adam", "sgd"] = pydantic.Field(default="adam", description="adam (FedLeak's) or sgd")
    lr: float = pydantic.Field(default=0.1, gt=0, description="step size")
    iterations: int = pydantic.Field(default=10_000, ge=1, description="steps (the released code's 10,000)")
    lr_schedule: Literal["none", "milestones", "cosine"] = pydantic.Field(
        default="cosine", description="cosine decay (FedLeak's), milestones or none"
    )
    boxed: bool = pydantic.Field(default=True, description="clamp to the valid pixel range after every step")
    tv: float = pydantic.Field(default=1e-5, ge=0, description="weight of the total-variation prior")
    tolerance: float = pydantic.Field(default=0.0, ge=0, description="stop below this objective (0: never)")

    @pydantic.field_validator("signed")
    @classmethod
    def _signed_by_the_blend(cls, value: bool) -> bool:
        if value:
            raise ValueError("true; FedLeak's step is already a blend of signed gradients: leave it false")
        return value

    @pydantic.field_validator("labels")
    @classmethod
    def _no_joint_labels(cls, value: str) -> str:
        if value == "joint":
            raise ValueError("'joint'; FedLeak steps on images only: known, infer, bias or auto")
        return value


def partial_matching_distance(
    dummy: Sequence[torch.Tensor],
    target: Sequence[torch.Tensor],
    weights: Sequence[float] | None = None,
    *,
    keep_fraction: float = 0.5,
) -> torch.Tensor:
    """Σ_tensors w_t·(mean|m⊙(g − g')| + 1 − cos(m⊙g, m⊙g')), m the entries where |g'| (the dummy gradient)
    is in its tensor's top ``keep_fraction`` (a mask recomputed at every call, not differentiated)."""
    total = dummy[0].new_zeros(())
    for i, (d, t) in enumerate(zip(dummy, target, strict=True)):
        w = 1.0 if weights is None else weights[i]
        if w == 0:
            continue
        magnitude = d.detach().abs()
        if keep_fraction < 1 and magnitude.numel() > 1:
            # the (1 − keep)-quantile, as torch.quantile interpolates it (which refuses tensors over 16M
            # entries), and every entry at or above it: ties and all-zero tensors keep all their entries
            flat = magnitude.flatten().sort().values
            position = (1.0 - keep_fraction) * (flat.numel() - 1)
            low = math.floor(position)
            high = min(low + 1, flat.numel() - 1)
            threshold = flat[low] + (position - low) * (flat[high] - flat[low])
            mask = (magnitude >= threshold).to(d.dtype)
            d, t = d * mask, t * mask
        l1 = (t - d).abs().mean()
        cosine = (t * d).sum() / (t.norm() * d.norm() + 1e-8)
        total = total + w * (l1 + 1 - cosine)  # + 1: zero at a perfect match, as tolerance expects
    return total


class FedLeak(GradientInversion):
    """FedLeak (Fan et al., USENIX Security 2025): partial gradient matching and a look-ahead-blended
    signed step (module docstring). Parameters: :class:`FedLeakParams`."""

    params: FedLeakParams

    def _distance(self, view: ServerView) -> Distance:
        keep = self.params.keep_fraction

        def distance(dummy, target, weights=None):  # type: ignore[no-untyped-def]
            return partial_matching_distance(dummy, target, weights, keep_fraction=keep)

        return distance

    def _wrapped(self, objective: Objective, box: tuple[torch.Tensor, torch.Tensor] | None) -> Objective:
        """The objective whose value is the matching objective at x and whose image gradient is the blend
        (1 − λ)·sign g(x) + λ·sign g(x − ρ·sign g(x)); the loop must not sign it again."""
        if self.params.signed:  # a copy made with with_params skips the validator
            raise ConfigError("signed: true; FedLeak's step is already a blend of signed gradients")
        lam = self.params.regularization
        # the look-ahead step follows the step size's schedule, as the reference's look-ahead is one step
        # of its own optimizer: a clock advanced once per evaluation (one per step on the Adam/SGD loop)
        clock = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=self.params.lookahead)
        schedule = lr_scheduler(clock, self.params)

        def blended(x: torch.Tensor, logits: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
            rho = clock.param_groups[0]["lr"]
            clock.step()
            if schedule is not None:
                schedule.step()
            loss, distance = objective(x, logits)
            here = torch.autograd.grad(loss, x)[0].sign()
            step = here
            if lam:
                ahead = x.detach() - rho * here
                if box is not None:
                    ahead = torch.max(torch.min(ahead, box[1]), box[0])
                ahead.requires_grad_(True)
                there = torch.autograd.grad(objective(ahead, logits)[0], ahead)[0].sign()
                step = (1 - lam) * here + lam * there
            # value: the objective at x; gradient w.r.t. x: the blended step
            surrogate = loss.detach() + ((x - x.detach()) * step).sum()
            return surrogate, distance.detach()

        return blended


ATTACKS.register(
    "fedleak",
    summary="FedLeak: partial gradient matching (each tensor's top half by dummy-gradient magnitude, "
    "L1 + 1 − cosine) and a look-ahead-blended signed Adam step (λ 0.3), TV 1e-5, cosine decay",
    reference="Fan et al., Boosting Gradient Leakage Attacks: Data Reconstruction in Realistic FL "
    "Settings, USENIX Security 2025 (released code: 50 % kept, λ 0.3, AdamW lr 0.01 on a generator)",
    params=FedLeakParams,
    threat=OBSERVER,
)(FedLeak)
