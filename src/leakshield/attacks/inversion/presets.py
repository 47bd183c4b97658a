"""Named presets of the gradient-inversion engine with their papers' settings."""

from __future__ import annotations

from typing import Literal

import pydantic

from leakshield.attacks.base import ATTACKS
from leakshield.attacks.inversion.engine import GradientInversion, GradientInversionParams


class IDLGParams(GradientInversionParams):
    """iDLG (Zhao et al. 2020) as released: L2 distance, L-BFGS (lr 1, 20 inner steps, history 100),
    300 iterations, label inferred from the last-layer gradient, no prior, no box, stop at 1e-6."""

    distance: Literal["l2", "cosine"] = "l2"
    optimizer: Literal["lbfgs", "adam"] = "lbfgs"
    lr: float = pydantic.Field(default=1.0, gt=0)
    iterations: int = pydantic.Field(default=300, ge=1)
    labels: Literal["auto", "known", "infer"] = "infer"


class IGParams(GradientInversionParams):
    """Inverting Gradients (Geiping et al. 2020) as run for its paper: cosine distance, TV 1e-4, Adam
    lr 0.1 on signed gradients, boxed, 24,000 iterations with the lr decayed ×0.1 at 3/8, 5/8, 7/8 of
    the budget (scaled to any ``iterations``), randn init, labels known when granted else inferred."""

    distance: Literal["l2", "cosine"] = "cosine"
    optimizer: Literal["lbfgs", "adam"] = "adam"
    lr: float = pydantic.Field(default=0.1, gt=0)
    iterations: int = pydantic.Field(default=24_000, ge=1)
    tv: float = pydantic.Field(default=1e-4, ge=0)
    signed: bool = True
    boxed: bool = True
    lr_schedule: Literal["none", "milestones"] = "milestones"
    tolerance: float = pydantic.Field(default=0.0, ge=0)


@ATTACKS.register(
    "idlg",
    summary="gradient matching: L2 + L-BFGS, label inferred by the iDLG rule, 300 iterations",
    reference="Zhao et al., iDLG: Improved Deep Leakage from Gradients, arXiv:2001.02610 (2020)",
    params=IDLGParams,
)
class IDLG(GradientInversion):
    """iDLG preset of :class:`GradientInversion` (parameters: :class:`IDLGParams`)."""


@ATTACKS.register(
    "ig",
    summary="Inverting Gradients: cosine + TV 1e-4 + signed Adam lr 0.1, boxed, milestone schedule",
    reference="Geiping et al., Inverting Gradients, NeurIPS 2020",
    params=IGParams,
)
class InvertingGradients(GradientInversion):
    """Inverting Gradients preset of :class:`GradientInversion` (parameters: :class:`IGParams`)."""


@ATTACKS.register(
    "gradient-inversion",
    summary="the gradient-matching engine with every part configurable (defaults: DLG's L2 + L-BFGS)",
    reference="Zhu et al., NeurIPS 2019; Zhao et al., 2020; Geiping et al., NeurIPS 2020",
    params=GradientInversionParams,
)
class ConfigurableInversion(GradientInversion):
    """The engine itself, for settings no preset names."""
