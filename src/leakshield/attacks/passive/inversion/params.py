"""Parameters of the gradient-inversion engine (validated; errors name the field and allowed values)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pydantic

from leakshield.registry import Params


class GradientInversionParams(Params):
    """Parameters of :class:`GradientInversion`, grouped as matching, optimization, priors, start,
    labels and adaptive parts; each field's description says what it does. How it runs (path,
    compile_after, victim_shards) is not a parameter: see :class:`~leakshield.attacks.execution.Execution`.
    """

    distance: Literal["l2", "l1", "cosine"] = pydantic.Field(
        default="l2",
        description="gradient distance: l2 (DLG), l1, or cosine (IG, global over the matched layers)",
    )
    parameters: list[str] | None = pydantic.Field(
        default=None, description="glob patterns of the parameter names to match (None: all)"
    )
    layer_weights: dict[str, pydantic.NonNegativeFloat] = pydantic.Field(
        default_factory=dict,
        description="glob pattern → weight of the matched layers (first matching pattern wins, default 1; "
        "0 drops a layer)",
    )
    optimizer: Literal["lbfgs", "adam", "sgd"] = pydantic.Field(
        default="lbfgs", description="lbfgs, adam, or sgd (with momentum)"
    )
    lr: float = pydantic.Field(default=1.0, gt=0, description="step size")
    momentum: float = pydantic.Field(default=0.0, ge=0, lt=1, description="SGD momentum")
    iterations: int = pydantic.Field(
        default=300,
        ge=1,
        description="steps (L-BFGS: outer steps of up to lbfgs_max_iter evaluations each)",
    )
    lr_schedule: Literal["none", "milestones", "cosine"] = pydantic.Field(
        default="none",
        description="milestones: lr ÷ 10 at 3/8, 5/8 and 7/8 of the budget (IG's schedule scaled to it); "
        "cosine: decay to 0 after warmup linear warm-up steps",
    )
    warmup: int = pydantic.Field(default=0, ge=0, description="linear warm-up steps of the cosine schedule")
    signed: bool = pydantic.Field(default=False, description="step on the sign of the image gradient (IG)")
    boxed: bool = pydantic.Field(default=False, description="clamp to the valid pixel range after every step")
    tv: float = pydantic.Field(default=0.0, ge=0, description="weight of the total-variation prior (0: off)")
    image_norm: float = pydantic.Field(
        default=0.0, ge=0, description="weight of the mean squared normalized pixel prior (0: off)"
    )
    bn_stats: float = pydantic.Field(
        default=0.0, ge=0, description="weight of BatchNorm-statistics matching (GradInversion; 0: off)"
    )
    task_loss: float = pydantic.Field(
        default=0.0, ge=0, description="weight of the dummy batch's cross-entropy (CPL; 0: off)"
    )
    init: Literal["randn", "uniform", "patterned", "constant", "image"] = pydantic.Field(
        default="randn",
        description="start: randn or uniform (normalized space), patterned (CPL: a half-size patch tiled "
        "2×2), constant (mid-grey) or image (init_image)",
    )
    init_image: str | None = pydantic.Field(
        default=None, description="a .png or .npy file to start from (init: image)"
    )
    labels: Literal["auto", "known", "infer", "bias", "joint"] = pydantic.Field(
        default="auto",
        description="known (the threat model must grant them), infer (iDLG rule; batch rule for larger "
        "batches), bias (batch 1: the loss gradient w.r.t. the logits read off the classifier's bias "
        "gradient, so soft and mixed labels match exactly), joint (optimized as soft labels, DLG), "
        "auto (known if granted, else inferred)",
    )
    restarts: int = pydantic.Field(
        default=1,
        ge=1,
        description="independent runs; the lowest final gradient distance is kept, diverging runs dropped",
    )
    tolerance: float = pydantic.Field(
        default=1e-6, ge=0, description="stop when the gradient distance falls below it"
    )
    patience: int = pydantic.Field(
        default=0,
        ge=0,
        description="Adam/SGD: stop a victim's run once its objective has not decreased for that many "
        "steps (PRECODE's IGA: 1200; 0: never)",
    )
    lbfgs_max_iter: int = pydantic.Field(default=20, ge=1, description="L-BFGS evaluations per outer step")
    lbfgs_history: int = pydantic.Field(default=100, ge=1, description="L-BFGS curvature pairs kept")
    lbfgs_max_evaluations: int | None = pydantic.Field(
        default=None,
        ge=1,
        description="L-BFGS: stop a victim's restart after the outer step in which its objective evaluations "
        "reach this many (None: only iterations bound it). Bounds a straggler: victims that converge stop "
        "early, and one that does not would keep a batched run going alone; each reconstruction's stats "
        "count its evaluations and the restarts this bound stopped (evaluation_budget_hit)",
    )
    lbfgs_line_search: Literal["strong_wolfe", "none"] = pydantic.Field(
        default="strong_wolfe", description="strong_wolfe, or none as in the DLG reference"
    )
    match_released: bool = pydantic.Field(
        default=False,
        description="compare only the entries the client released (non-zero in the update; against pruning)",
    )
    dropout_samples: int = pydantic.Field(
        default=1,
        ge=1,
        description="average the dummy gradient over that many draws of the model's stochastic layers "
        "(dropout masks, PRECODE's bottleneck)",
    )

    @pydantic.model_validator(mode="after")
    def _image_init_needs_a_file(self) -> GradientInversionParams:
        if self.init_image is not None and not Path(self.init_image).expanduser().is_file():
            raise ValueError(f"init_image: no file {self.init_image}")
        return self
