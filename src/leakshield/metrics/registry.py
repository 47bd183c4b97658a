"""The metric registry: every number leakshield reports, with what a reader needs to interpret it
(higher or lower is better, unit, range, how many decimals) and whether it describes an attack cell
(``privacy``) or an FL training cell (``utility``). The evaluator reads it to match reconstructions
and the report to format and join tables; ``leakshield list metrics`` prints it.

Derived columns resolve to their base metric: ``psnr_std`` (spread over images), ``psnr_max`` /
``ssim_max`` / ``lpips_min`` (the best reconstruction of the cell, the worst case for privacy: LODA's
Max PSNR and Min LPIPS), ``ssim_sensitive`` (the sensitive images' own mean), ``psnr_defended`` (scored
against the defended input x'), ``psnr_component`` (against each image's mixing component of largest
weight, MixUp and InstaHide as LODA scores them)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from leakshield.errors import UnknownNameError

MetricKind = Literal["privacy", "utility", "detection", "diagnostic"]
DERIVED_SUFFIXES = ("_std", "_sensitive", "_defended", "_component", "_max", "_min")


@dataclass(frozen=True)
class MetricSpec:
    """One reported metric. ``higher_is_better`` from the *attacker's* side for privacy metrics (a
    higher SSIM is a better reconstruction) and from the user's side for utility metrics. ``range`` is
    (low, high), ±inf when unbounded; ``precision`` the decimals tables show."""

    name: str
    summary: str
    kind: MetricKind
    higher_is_better: bool
    unit: str = ""
    range: tuple[float, float] = (0.0, 1.0)
    precision: int = 3


class MetricRegistry:
    """Name → :class:`MetricSpec`, resolving derived column names to their base metric."""

    def __init__(self) -> None:
        self._specs: dict[str, MetricSpec] = {}

    def register(self, spec: MetricSpec) -> MetricSpec:
        if spec.name in self._specs:
            raise ValueError(f"metric {spec.name!r} is registered twice")
        self._specs[spec.name] = spec
        return spec

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.find(name) is not None

    def __iter__(self):
        return iter(self._specs.values())

    def names(self) -> list[str]:
        return list(self._specs)

    def find(self, name: str) -> MetricSpec | None:
        """The spec of ``name`` or of the base metric a derived column comes from; None if unknown."""
        if name in self._specs:
            return self._specs[name]
        for suffix in DERIVED_SUFFIXES:
            if name.endswith(suffix) and name.removesuffix(suffix) in self._specs:
                return self._specs[name.removesuffix(suffix)]
        return None

    def get(self, name: str) -> MetricSpec:
        spec = self.find(name)
        if spec is None:
            raise UnknownNameError(f"unknown metric {name!r}; allowed: {', '.join(self._specs)}")
        return spec

    def precision(self, name: str, default: int = 3) -> int:
        spec = self.find(name)
        return spec.precision if spec is not None else default

    def of_kind(self, kind: MetricKind) -> tuple[str, ...]:
        return tuple(s.name for s in self._specs.values() if s.kind == kind)


METRICS = MetricRegistry()
_UNBOUNDED = (-math.inf, math.inf)
for _spec in (
    MetricSpec("mse", "mean squared error per image, [0, 1] pixels", "privacy", False, precision=4),
    MetricSpec(
        "mse_normalized",
        "mean squared error per image in the model's normalized input space, (x − mean)/std (PRECODE's "
        "convention)",
        "privacy",
        False,
        range=(0.0, math.inf),
        precision=4,
    ),
    MetricSpec(
        "psnr",
        "peak signal-to-noise ratio, images clamped to [0, 1], data range 1, capped at 100 dB",
        "privacy",
        True,
        unit="dB",
        range=(0.0, 100.0),
        precision=2,
    ),
    MetricSpec(
        "ssim",
        "structural similarity, Gaussian 11×11 σ 1.5, scikit-image convention (valid region)",
        "privacy",
        True,
        range=(-1.0, 1.0),
    ),
    MetricSpec(
        "lpips",
        "learned perceptual distance (AlexNet/VGG), needs a local weights file; else n/a",
        "privacy",
        False,
        range=(0.0, math.inf),
    ),
    MetricSpec(
        "asr", "attack success rate: share of images with SSIM ≥ threshold (default 0.6)", "privacy", True
    ),
    MetricSpec(
        "class_ssim",
        "class-level SSIM (Anti-GAN Eq. 5): each generated image's mean SSIM to every private image of its "
        "class, averaged; uniform 8×8 window, valid positions, population covariance, data range 1",
        "privacy",
        True,
        range=(-1.0, 1.0),
    ),
    MetricSpec(
        "class_ssim_public",
        "class-level SSIM of the public split's real images of the attacked classes (a perfect generator)",
        "diagnostic",
        True,
        range=(-1.0, 1.0),
    ),
    MetricSpec(
        "accuracy_attacked",
        "test accuracy of the global model after the rounds with the participant attacker",
        "diagnostic",
        True,
    ),
    MetricSpec(
        "samples",
        "generated images scored by class-level SSIM",
        "diagnostic",
        True,
        range=(0.0, math.inf),
        precision=0,
    ),
    MetricSpec("label_acc", "share of labels the attack recovered (matched images)", "privacy", True),
    MetricSpec("accuracy", "test accuracy after FL training under the defense", "utility", True),
    MetricSpec("accuracy_train", "training-split accuracy after FL training", "utility", True),
    MetricSpec(
        "adr",
        "accuracy degradation ratio (acc_clean − acc_defended) / acc_clean",
        "utility",
        False,
        range=_UNBOUNDED,
    ),
    MetricSpec(
        "epsilon",
        "ε of (ε, δ)-DP spent by the most-used client (DP-SGD)",
        "utility",
        False,
        range=(0.0, math.inf),
    ),
    MetricSpec(
        "epsilon_client",
        "client-level ε of (ε, δ)-DP (one client's whole data; DP-FedAvg, PRV or RDP accountant)",
        "utility",
        False,
        range=(0.0, math.inf),
    ),
    MetricSpec(
        "epsilon_target",
        "the ε budget DP-SGD's σ was set for (target_epsilon over target_steps local steps)",
        "utility",
        False,
        range=(0.0, math.inf),
    ),
    MetricSpec("delta", "δ at which ε is reported", "utility", False),
    MetricSpec(
        "tpr", "share of models prepared by model-modifying attacks a client guard refused", "detection", True
    ),
    MetricSpec("fpr", "share of honest global models a client guard refused", "detection", False),
    MetricSpec(
        "models_malicious",
        "malicious models a guard judged",
        "diagnostic",
        True,
        range=(0.0, math.inf),
        precision=0,
    ),
    MetricSpec(
        "models_honest",
        "honest models a guard judged",
        "diagnostic",
        True,
        range=(0.0, math.inf),
        precision=0,
    ),
    MetricSpec(
        "refused",
        "share of victims whose guard refused the model sent (they shared nothing)",
        "privacy",
        False,
    ),
    MetricSpec("images", "images scored in the cell", "diagnostic", True, range=(0.0, math.inf), precision=0),
    MetricSpec(
        "seconds",
        "wall-clock seconds a cell took",
        "diagnostic",
        False,
        unit="s",
        range=(0.0, math.inf),
        precision=1,
    ),
):
    METRICS.register(_spec)
#: the columns of a utility cell that the report joins into the attack rows of its model/defense/seed
UTILITY_COLUMNS = (*METRICS.of_kind("utility"), "accuracy_sensitive")
