"""The world of a run: one builder of its data, client partition, fixed victims, LPIPS network,
artifact cache and trained models, shared by every cell the run computes, and the evaluator's entry
points (it alone holds the private images)."""

from __future__ import annotations

from typing import Any

import torch

from leakshield.artifacts import ArtifactCache
from leakshield.attacks.base import Reconstruction
from leakshield.data import ImageSet, load_dataset, partition_indices
from leakshield.errors import LeakshieldError
from leakshield.experiment.config import ExperimentConfig
from leakshield.experiment.evaluation import VictimScore, aggregate, load_cell_lpips, score_victim
from leakshield.experiment.fitting import ArtifactUse
from leakshield.experiment.protocols import CellOutput
from leakshield.experiment.training import TrainedModels
from leakshield.experiment.victims import draw_victims


def resolve_device(device: str) -> torch.device:
    """``auto`` → CUDA when available, else CPU; ``cuda`` without a GPU is a user error."""
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
        ds = config.dataset
        self.data = load_dataset(ds.name, ds.params, root=ds.root)
        self.info = self.data.info
        parts = partition_indices(
            self.data.train.y, config.fl.clients, config.fl.partition, config.partition_seed
        )
        self.clients = [self.data.train.subset(p) for p in parts]
        self.victims = draw_victims(config, self.clients)
        self.lpips, self.lpips_reason = load_cell_lpips(config.metrics.lpips, device)
        self.cache = cache or ArtifactCache()
        self.models = TrainedModels(
            config,
            self.data,
            [c.to(device) for c in self.clients],
            self.data.public.to(device),
            device,
            self.cache,
            progress,
        )

    @property
    def artifacts_used(self) -> list[ArtifactUse]:
        return self.models.used

    def score(
        self, reconstruction: Reconstruction, batch: ImageSet, defended: torch.Tensor | None = None
    ) -> VictimScore:
        """The evaluator: ``reconstruction`` against the private ``batch`` (and the defended inputs)."""
        return score_victim(
            reconstruction,
            batch.x,
            batch.y,
            sensitive=batch.sensitive,
            defended=defended,
            match_on=self.config.metrics.match_on,
            lpips=self.lpips,
        )

    def output(
        self, scores: list[VictimScore], grid: list[torch.Tensor], extra: list[dict[str, Any]] | None = None
    ) -> CellOutput:
        """Aggregate victim scores into a cell's metrics and rows."""
        metrics = aggregate(scores, self.config.metrics.asr_threshold)
        if "lpips" not in metrics:
            metrics["lpips_note"] = self.lpips_reason  # type: ignore[assignment]
        victims = [
            {**s.per_image, "label_acc": s.label_acc, **(extra[i] if extra else {})}
            for i, s in enumerate(scores)
        ]
        return CellOutput(metrics=metrics, victims=victims, grid_rows=grid)
