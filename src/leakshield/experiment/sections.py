"""The experiment config's plain sections (threat, attack, victims, utility, metrics, report layout):
validated with pydantic; the components and the whole config are in :mod:`leakshield.experiment.config`."""

from __future__ import annotations

from typing import Literal

import pydantic

from leakshield.fl.config import LocalTraining
from leakshield.metrics.sensitivity import SensitivityRule


class Section(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", allow_inf_nan=False)


class ThreatSection(Section):
    """labels_known: the server knows the victims' labels (breaching's ``provide_labels``)."""

    labels_known: bool = False


class AttackSection(Section):
    """rounds: FL rounds after which the victim is attacked (0 = the untrained model). update: how the
    victim computes the attacked update (default: as in ``fl.local``; e.g. train with FedAvg but attack a
    FedSGD gradient). model_mode: whether the victim runs the model in eval mode or train mode."""

    rounds: list[pydantic.NonNegativeInt] = pydantic.Field(default_factory=lambda: [0], min_length=1)
    update: LocalTraining | None = None
    model_mode: Literal["eval", "train"] = "eval"
    threat: ThreatSection = pydantic.Field(default_factory=ThreatSection)


class VictimSection(Section):
    """count victim batches of batch_size images each, drawn with seed from client's training data;
    the same victims for every model, defense and attack. per_seed: each cell seed draws its own victims
    (default false: the same in every seed). offset: batches of the draw skipped first (victims disjoint
    from another grid's within a seed). sensitive: how many images of each batch are drawn from the
    client's sensitive samples (``metrics.sensitive`` defines them; they are put last in the batch and
    flagged); None draws without regard to sensitivity."""

    count: pydantic.PositiveInt = 8
    batch_size: pydantic.PositiveInt = 1
    seed: int = 0
    client: pydantic.NonNegativeInt = 0
    sensitive: pydantic.NonNegativeInt | None = None
    per_seed: bool = False
    offset: pydantic.NonNegativeInt = 0

    @pydantic.model_validator(mode="after")
    def _sensitive_within_batch(self) -> VictimSection:
        if self.sensitive is not None and self.sensitive > self.batch_size:
            raise ValueError(f"sensitive ({self.sensitive}) exceeds batch_size ({self.batch_size})")
        return self


class UtilitySection(Section):
    """Full FL training under each defense to measure test accuracy (0 rounds disables it). ``seeds``:
    the experiment's seeds that measure it (default: every seed; fewer where training dominates the
    cost and the attacks need more seeds than the accuracy does). ``detection``: a client guard's
    detection cells (its refusals of honest and tampered models; the leaderboard's stage 2, which
    reuses stage 1's, turns them off)."""

    rounds: pydantic.NonNegativeInt = 20
    seeds: list[int] | None = pydantic.Field(default=None, min_length=1)
    detection: bool = True


class LPIPSSection(Section):
    """weights: a local .safetensors file (see leakshield.metrics.lpips); without it LPIPS is n/a."""

    net: Literal["alex", "vgg"] = "alex"
    weights: str | None = None


class MetricSection(Section):
    """asr_threshold: SSIM at which an image counts as reconstructed (PRECODE's 0.6). match_on: the
    metric reconstructions are matched to the truth on. sensitive: which training samples of the
    defended clients count as sensitive for ``accuracy_sensitive`` (DCS² Table 1), the same samples for
    every row; None uses the rule of a defense that has one (DCS²) and leaves other rows without it.
    no_information: the baseline's guess for each victim image (and a refused victim's): ``public-mean``,
    the public split's mean image; ``leave-one-out``, the mean of every image the dataset holds (train,
    public and test) outside the victim's batch, for a small fixed set such as a file of 128 victims."""

    asr_threshold: float = pydantic.Field(default=0.6, ge=0, le=1)
    match_on: Literal["ssim", "psnr", "mse"] = "ssim"
    lpips: LPIPSSection = pydantic.Field(default_factory=LPIPSSection)
    sensitive: SensitivityRule | None = None
    no_information: Literal["public-mean", "leave-one-out"] = "public-mean"


Dimension = Literal["model", "defense", "attack", "round", "seed", "batch", "clients", "metric"]


class SweepPlot(Section):
    """A line plot of ``metrics`` against a defense parameter (e.g. Anti-GAN's Fig. 4): ``points`` maps
    defense labels to the parameter's value; privacy metrics get one line per attack."""

    title: str
    parameter: str
    points: dict[str, float] = pydantic.Field(min_length=2)
    metrics: list[str] = pydantic.Field(default=["ssim", "adr"], min_length=1)


class ReportSection(Section):
    """Layout of the tables: cells grouped by ``rows`` × ``columns`` (any of model, defense, attack,
    round, seed, metric), showing the mean of each metric in ``values`` over the unlisted dimensions.
    E.g. PRECODE's Table 2 has ``rows: [metric]`` and ``columns: [model, defense]``."""

    rows: list[Dimension] = ["model", "defense"]
    columns: list[Dimension] = ["attack"]
    values: list[str] = pydantic.Field(default=["psnr", "ssim", "asr", "accuracy"], min_length=1)
    scatter: Literal["psnr", "ssim"] = "ssim"
    sweeps: list[SweepPlot] = []

    @pydantic.model_validator(mode="after")
    def _distinct(self) -> ReportSection:
        both = set(self.rows) & set(self.columns)
        if both:
            raise ValueError(f"{sorted(both)} cannot be both a row and a column dimension")
        return self
