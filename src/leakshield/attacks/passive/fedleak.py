"""FedLeak (Fan et al., "Boosting Gradient Leakage Attacks: Data Reconstruction in Realistic FL
Settings", USENIX Security 2025): gradient matching built for large batches, with two changes to
Inverting Gradients' recipe.

* **Partial gradient matching.** Per parameter tensor only the entries where the dummy gradient is
  largest are compared — those with |∇θ'| at or above the tensor's ``1 − keep_fraction`` quantile (the
  released code keeps half) — by mean |g − g'| + 1 − cos(g, g'), both gradients zeroed outside the kept
  entries (the mean runs over all entries, as in the released code), summed over tensors. The intent, as we
  read it: at a large batch the dummy gradient's small entries are the ones it cannot yet explain, and
  matching them early pulls every image towards the batch's average.
* **Gradient regularization.** Each step moves along a blend of the signed gradient here and at a
  look-ahead point, (1 − λ)·sign g(here) + λ·sign g(ahead) with λ = ``regularization`` (0.3 in the
  released code), which damps the steps that a sharp, single-point gradient would take. As released the
  look-ahead point is one step of the attack's own optimizer (the double step below); leakshield's earlier
  reading (``lookahead_step: signed``) puts it at x − ρ·sign g(x), ρ = ``lookahead`` decayed with the step
  size's schedule, inside the pixel box.

As released, FedLeak searches the images through a generator, with a double optimizer step and a median
filter on its output (``fedleak_generator``, from the release's ``generator.py``); each is an option:

* **Generator parameterization** (``parameterization: generator``, the default): the images are
  G(z), G a randomly initialized, untrained progressive generator (spectrally normalized convolutions,
  BatchNorm, LeakyReLU, a sigmoid out; ``generator_width`` 256 channels) and z a fixed Gaussian code per
  image (``latent_dim`` 128); the search moves G's parameters, never the pixels. ``pixels`` optimizes the
  pixels themselves, as Inverting Gradients does.
* **Double optimizer step** (``lookahead_step: optimizer``, the default): the look-ahead point is one
  step of the attack's own optimizer (AdamW, lr 0.01, weight decay 0.01, cosine decay) along the signed
  gradient; there the signed gradient is taken again, the searched tensors are put back, and a second
  step goes along the blend. Both steps move the optimizer's moments. ``signed`` is leakshield's earlier
  reading (pixels only, on the engine's Adam/SGD loop): a look-ahead at x − ρ·sign g(x), ρ =
  ``lookahead`` decayed with the schedule, and one step.
* **Median filter** (``median_filter: 5``): the final images, in pixel space, pass once through a 5×5
  median filter (reflect padding); 0 turns it off.

Defaults are the release's (10,000 steps at 128 px on a GPU there); on a CPU the generator at width 256
costs seconds a step: ``generator_width`` and ``iterations`` scale it down (a CPU row says its size).
:data:`PIXEL_PORT` holds the options of leakshield's earlier pixel port (pixels, Adam lr 0.1, the signed
look-ahead, no filter). On FedAvg updates the client's local steps are unrolled as for every
gradient-matching attack. A reconstruction's ``grad_distance`` stat is FedLeak's own partial distance
(not comparable with other attacks'), at the images before the filter. Parameters: :class:`FedLeakParams`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import pydantic
import torch

from leakshield.attacks.base import ATTACKS
from leakshield.attacks.passive.fedleak_generator import FedLeakGenerator, median_filter, released_search
from leakshield.attacks.passive.inversion.engine import GradientInversion, GradientInversionParams
from leakshield.attacks.passive.inversion.loops import Objective, Restart, lr_scheduler
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
        default=0.1,
        gt=0,
        description="ρ: the signed step (normalized pixels) to the look-ahead point (lookahead_step: signed)",
    )
    parameterization: Literal["generator", "pixels"] = pydantic.Field(
        default="generator",
        description="generator (the release's: the search moves a randomly initialized image generator's "
        "parameters, images G(z) for a fixed code z per image) or pixels (the pixels themselves)",
    )
    generator_width: int = pydantic.Field(
        default=256, ge=4, description="the generator's channels up to 32 px (the release's 256)"
    )
    latent_dim: int = pydantic.Field(default=128, ge=1, description="the generator's code per image (128)")
    lookahead_step: Literal["optimizer", "signed"] = pydantic.Field(
        default="optimizer",
        description="optimizer (the release's double step: the look-ahead point is one step of the attack's "
        "optimizer, then a second step along the blend) or signed (pixels only: x − ρ·sign g, one step)",
    )
    median_filter: int = pydantic.Field(
        default=5, ge=0, description="the odd window of the median filter on the final images (0: off)"
    )
    optimizer: Literal["adamw", "adam", "sgd"] = pydantic.Field(
        default="adamw", description="adamw (the release's), adam or sgd"
    )
    weight_decay: float = pydantic.Field(default=0.01, ge=0, description="AdamW's decoupled weight decay")
    lr: float = pydantic.Field(default=0.01, gt=0, description="step size (the release's 0.01)")
    iterations: int = pydantic.Field(default=10_000, ge=1, description="steps (the release's 10,000)")
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

    @pydantic.field_validator("median_filter")
    @classmethod
    def _odd_window(cls, value: int) -> int:
        if value > 1 and value % 2 == 0:
            raise ValueError(f"{value}; a median window is odd (the release's 5), or 0 for none")
        return value

    @pydantic.model_validator(mode="after")
    def _signed_lookahead_on_pixels(self) -> FedLeakParams:
        pixels = self.parameterization == "pixels"
        if self.lookahead_step == "signed" and (not pixels or self.optimizer == "adamw"):
            raise ValueError(
                "lookahead_step: signed runs on pixels with adam or sgd; the generator and adamw take the "
                "release's optimizer look-ahead"
            )
        return self

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


#: leakshield's earlier pixel port of FedLeak (before the release's generator, double step and filter):
#: what ``fedleak`` measured on the leaderboard and in benchmarks/realistic_attacks.py as ``fedleak``
PIXEL_PORT: dict[str, object] = {
    "parameterization": "pixels",
    "lookahead_step": "signed",
    "optimizer": "adam",
    "lr": 0.1,
    "median_filter": 0,
}


class FedLeak(GradientInversion):
    """FedLeak (Fan et al., USENIX Security 2025): partial gradient matching and a look-ahead-blended
    signed step (module docstring). Parameters: :class:`FedLeakParams`."""

    params: FedLeakParams

    def _distance(self, view: ServerView) -> Distance:
        keep = self.params.keep_fraction

        def distance(dummy, target, weights=None):  # type: ignore[no-untyped-def]
            return partial_matching_distance(dummy, target, weights, keep_fraction=keep)

        return distance

    def _optimize(
        self,
        x0: torch.Tensor,
        logits0: torch.Tensor | None,
        objective: Objective,
        bounds: tuple[torch.Tensor, torch.Tensor],
        gen: torch.Generator,
    ) -> Restart:
        """One restart: the engine's loop on the blended objective (pixels, signed look-ahead), or the
        release's double-step loop over the pixels or over a fresh generator (its code z drawn from
        ``gen``, its weights from the attack's seeded global generator, built on the CPU and moved to
        the images' device)."""
        p = self.params
        if p.lookahead_step == "signed":
            return super()._optimize(x0, logits0, objective, bounds, gen)
        lo, hi = bounds
        lam = p.regularization

        def matching(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return objective(x, None)

        if p.parameterization == "pixels":
            x = x0.clone().requires_grad_(True)

            def box() -> None:
                with torch.no_grad():
                    x.copy_(torch.max(torch.min(x, hi), lo))

            boxing = box if p.boxed else None
            return released_search(p, [x], lambda: x, matching, regularization=lam, box=boxing)
        shape = tuple(x0.shape[1:])
        codes = torch.randn(len(x0), p.latent_dim, generator=gen).to(x0.device)
        generator = FedLeakGenerator(shape, width=p.generator_width, latent=p.latent_dim).to(x0.device)
        generator.train()  # batch statistics, as the release's generator is never put in eval mode

        def render() -> torch.Tensor:
            return lo + generator(codes) * (hi - lo)  # (0, 1) pixels → the model's normalized space

        return released_search(p, list(generator.parameters()), render, matching, regularization=lam)

    def _merged(self, x: torch.Tensor, view: ServerView) -> torch.Tensor:
        """The final images through the median filter (pixel space), once, as the release does."""
        if self.params.median_filter <= 1:
            return x
        info = view.data_info
        return info.normalize(median_filter(info.denormalize(x), self.params.median_filter))

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
    summary="FedLeak as released: a randomly initialized image generator searched by AdamW (lr 0.01, cosine) "
    "with a double look-ahead step (λ 0.3), partial gradient matching (each tensor's top half by "
    "dummy-gradient magnitude, L1 + 1 − cosine), TV 1e-5, a 5×5 median filter on the output; "
    "parameterization: pixels for the pixel port",
    reference="Fan et al., Boosting Gradient Leakage Attacks: Data Reconstruction in Realistic FL "
    "Settings, USENIX Security 2025 (released code: 50 % kept, λ 0.3, AdamW lr 0.01 on a generator, "
    "10,000 steps, 5×5 median filter)",
    params=FedLeakParams,
    threat=OBSERVER,
)(FedLeak)
