"""Parameters of the gradient-inversion engine (validated; errors name the field and allowed values)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pydantic

from leakshield.registry import Params


class GradientInversionParams(Params):
    """Parameters of :class:`GradientInversion`.

    Matching — distance: ``l2`` (DLG), ``l1`` or ``cosine`` (IG, global over the matched layers).
    parameters: glob patterns of the parameter names to match (default: all). layer_weights: glob
    pattern → weight of the matching layers (first matching pattern wins, default 1; 0 drops a layer).
    Optimization — optimizer: ``lbfgs``, ``adam`` or ``sgd`` (with ``momentum``). lr: step size.
    iterations: steps (L-BFGS: outer steps of up to ``lbfgs_max_iter`` evaluations, strong-Wolfe line
    search unless ``lbfgs_line_search: none`` as in the DLG reference). lr_schedule: ``milestones`` decays
    the lr by 10 at 3/8, 5/8 and 7/8 of the budget (IG's schedule scaled to it), ``cosine`` decays to 0
    after ``warmup`` linear warm-up steps. signed: step on the sign of the image gradient (IG).
    boxed: clamp to the valid pixel range after every step.
    Priors — tv (total variation), image_norm (mean squared normalized pixel), bn_stats (BatchNorm
    statistics matching), task_loss (cross-entropy of the dummy batch, CPL): weights, 0 = off.
    Start — init: ``randn``, ``uniform`` (in normalized space), ``patterned`` (CPL: a random
    half-size patch tiled 2×2), ``constant`` (mid-grey) or ``image`` (``init_image``: a .png or .npy
    file, or images handed to the attack in code). labels: ``known`` (the threat model must grant them),
    ``infer`` (iDLG rule; batch rule for larger batches), ``bias`` (FedSGD, batch 1: no label at all —
    the loss gradient w.r.t. the logits is read off the classifier's bias gradient, so soft and mixed
    labels (MixUp, InstaHide) are matched exactly), ``joint`` (optimized as soft labels with the
    images, DLG), ``auto`` (known if granted, else inferred). restarts: independent runs, the one with
    the lowest final gradient distance kept; diverging (NaN/Inf) runs are dropped. tolerance: stop when
    the gradient distance falls below it.
    Adaptive parts — match_released: compare only the entries the client released (non-zero in the
    observed update; against pruning). dropout_samples: average the dummy gradient over that many draws
    of the model's stochastic layers (expectation over dropout masks or PRECODE's bottleneck samples).
    How it runs (path, compile_after, victim_shards) is not a parameter: see
    :class:`~leakshield.attacks.execution.Execution`.
    """

    distance: Literal["l2", "l1", "cosine"] = "l2"
    parameters: list[str] | None = None
    layer_weights: dict[str, pydantic.NonNegativeFloat] = pydantic.Field(default_factory=dict)
    optimizer: Literal["lbfgs", "adam", "sgd"] = "lbfgs"
    lr: float = pydantic.Field(default=1.0, gt=0)
    momentum: float = pydantic.Field(default=0.0, ge=0, lt=1)
    iterations: int = pydantic.Field(default=300, ge=1)
    lr_schedule: Literal["none", "milestones", "cosine"] = "none"
    warmup: int = pydantic.Field(default=0, ge=0)
    signed: bool = False
    boxed: bool = False
    tv: float = pydantic.Field(default=0.0, ge=0)
    image_norm: float = pydantic.Field(default=0.0, ge=0)
    bn_stats: float = pydantic.Field(default=0.0, ge=0)
    task_loss: float = pydantic.Field(default=0.0, ge=0)
    init: Literal["randn", "uniform", "patterned", "constant", "image"] = "randn"
    init_image: str | None = None
    labels: Literal["auto", "known", "infer", "bias", "joint"] = "auto"
    restarts: int = pydantic.Field(default=1, ge=1)
    tolerance: float = pydantic.Field(default=1e-6, ge=0)
    lbfgs_max_iter: int = pydantic.Field(default=20, ge=1)
    lbfgs_history: int = pydantic.Field(default=100, ge=1)
    lbfgs_line_search: Literal["strong_wolfe", "none"] = "strong_wolfe"
    match_released: bool = False
    dropout_samples: int = pydantic.Field(default=1, ge=1)

    @pydantic.model_validator(mode="after")
    def _image_init_needs_a_file(self) -> GradientInversionParams:
        if self.init_image is not None and not Path(self.init_image).expanduser().is_file():
            raise ValueError(f"init_image: no file {self.init_image}")
        return self
