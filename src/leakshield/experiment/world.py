"""The world of a run: one builder of its data, client partition, fixed victims, LPIPS network,
artifact cache and trained models, shared by every cell the run computes, and the evaluator's entry
points (it alone holds the private images)."""

from __future__ import annotations

from typing import Any

import torch

from leakshield.artifacts import ArtifactCache
from leakshield.attacks.base import Reconstruction
from leakshield.data import ImageSet
from leakshield.errors import LeakshieldError
from leakshield.experiment.aggregate_round import check_aggregates
from leakshield.experiment.axes import Scale
from leakshield.experiment.config import ExperimentConfig
from leakshield.experiment.evaluation import CellOutput, load_cell_lpips, score_reconstructions
from leakshield.experiment.federation import load_world
from leakshield.experiment.fitting import ArtifactUse
from leakshield.experiment.training import TrainedModels
from leakshield.experiment.victims import draw_victims
from leakshield.matmul_precision import apply_matmul_precision


def resolve_device(device: str) -> torch.device:
    """``auto`` → CUDA when available, else CPU; ``cuda`` without a GPU is a user error. Applies the
    matmul precision in force (:mod:`leakshield.matmul_precision`), so worker processes take it too."""
    apply_matmul_precision()
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise LeakshieldError("--device cuda: no CUDA device is available (use cpu or auto)")
    if device != "cpu" and not device.startswith("cuda"):
        raise LeakshieldError(f"--device {device!r}; allowed: cpu, cuda, cuda:N, auto")
    return torch.device(device)


class ExperimentContext:
    """Per-run shared state: data splits, client partition, the fixed victims, LPIPS, trained models
    and the artifact cache."""

    def __init__(
        self,
        config: ExperimentConfig,
        device: torch.device,
        progress: bool = False,
        cache: ArtifactCache | None = None,
    ) -> None:
        self.config = config
        self.device = device
        self.progress = progress
        self.data, self.clients = load_world(config)
        self.info = self.data.info
        self.victims = draw_victims(config, self.clients)
        self._victims_by_batch = {
            b: draw_victims(config, self.clients, b)
            for b in dict.fromkeys(s.batch for s in config.axes.scales())
            if b is not None
        }  # a mistaken batch size is refused before any work
        self._victims_by_seed: dict[tuple[int, int | None], list[ImageSet]] = {}
        check_aggregates(config, self.clients)
        self.lpips, self.lpips_reason = load_cell_lpips(config.metrics.lpips, device)
        self.cache = cache or ArtifactCache()
        self._every: tuple[torch.Tensor, int] | None = None  # the dataset's pixel sum and image count
        self.models = TrainedModels(
            config,
            self.data,
            [c.to(device) for c in self.clients],
            self.data.public.to(device),
            device,
            self.cache,
            progress,
        )

    def victims_of(self, scale: Scale | None, seed: int | None = None) -> list[ImageSet]:
        """The victims at a point of the scale axes (the config's batch size without one) — of cell seed
        ``seed`` when ``victims.per_seed``, else the same for every seed."""
        batch = None if scale is None else scale.batch
        if self.config.victims.per_seed and seed is not None:
            key = (seed, batch)
            if key not in self._victims_by_seed:
                self._victims_by_seed[key] = draw_victims(self.config, self.clients, batch, seed)
            return self._victims_by_seed[key]
        if batch is None:
            return self.victims
        return self._victims_by_batch[batch]

    @property
    def artifacts_used(self) -> list[ArtifactUse]:
        return self.models.used

    def no_information_guess(self, batch: ImageSet) -> Reconstruction:
        """The guess of an attacker that learned nothing (``metrics.no_information``): the public split's
        mean image for every image of ``batch``, or (``leave-one-out``) the mean of every image of the
        dataset outside the batch — the same for each of its images, so that matching cannot pair an
        image with a guess that holds it. Images ``max_train`` dropped are not counted."""
        if self.config.metrics.no_information == "leave-one-out":
            if self._every is None:
                splits = (self.data.train.x, self.data.public.x, self.data.test.x)
                total = sum(x.to(torch.float64).sum(dim=0, keepdim=True) for x in splits)
                self._every = (total, sum(len(x) for x in splits))
            total, count = self._every
            guess = leave_batch_out(total, count, batch.x)
        else:
            guess = self.data.public.x.mean(dim=0, keepdim=True)
        return Reconstruction(images=guess.expand(len(batch), -1, -1, -1).clone())

    def score(
        self,
        reconstructions: list[Reconstruction],
        truths: list[ImageSet],
        defended: list[torch.Tensor | None] | None = None,
        extra: list[dict[str, Any]] | None = None,
        components: list[torch.Tensor | None] | None = None,
    ) -> CellOutput:
        """The evaluator (it alone holds the private images): :func:`score_reconstructions` under the
        run's metric settings and LPIPS network."""
        return score_reconstructions(
            reconstructions,
            truths,
            metrics=self.config.metrics,
            lpips=self.lpips,
            lpips_reason=self.lpips_reason,
            defended=defended,
            extra=extra,
            std=self.info.std,
            components=components,
        )


def leave_batch_out(total: torch.Tensor, count: int, batch: torch.Tensor) -> torch.Tensor:
    """The mean image of a dataset of ``count`` images summing to ``total`` (1×C×H×W) without the images
    of ``batch`` (each of them one of the dataset's), on ``batch``'s device and dtype."""
    if count - len(batch) < 1:
        raise LeakshieldError(
            "metrics.no_information: leave-one-out needs an image outside the victim's batch"
        )
    rest = total.to(batch.device) - batch.to(torch.float64).sum(dim=0, keepdim=True)
    return (rest / (count - len(batch))).to(batch.dtype)
