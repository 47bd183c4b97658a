"""The one pipeline of DESIGN.md that every cell runs through: data → model (defense model stage,
fitted artifacts) → FL training to the attacked round → what the server observes of each victim
(:func:`~leakshield.fl.observation.observe_victim`) → attack → evaluator. No defense or attack has a
private code path here; see docs/architecture.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from leakshield.artifacts import ArtifactCache
from leakshield.attacks.base import Reconstruction, create_attack
from leakshield.attacks.gan.hitaj import HitajGAN
from leakshield.data import ImageSet, load_dataset, partition_indices
from leakshield.errors import LeakshieldError
from leakshield.experiment.cells import Cell
from leakshield.experiment.config import ExperimentConfig
from leakshield.experiment.evaluation import VictimScore, aggregate, load_cell_lpips, score_victim
from leakshield.experiment.feature_inference import run_feature_inference
from leakshield.experiment.fitting import ArtifactUse, FitSetting, fit_attack
from leakshield.experiment.training import TrainedModels
from leakshield.experiment.victims import draw_victims
from leakshield.fl import HonestClient, ServerKnowledge, ThreatModel, observe_victim, seeded_generator
from leakshield.metrics.sensitivity import sensitive_subset
from leakshield.metrics.utility import accuracy


@dataclass(frozen=True)
class CellOutput:
    metrics: dict[str, float]
    victims: list[dict[str, Any]]
    grid_rows: list[torch.Tensor] | None = None


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

    def run(self, cell: Cell) -> CellOutput:
        if cell.kind == "baseline":
            return self.run_baseline()
        if cell.kind == "utility":
            return self.run_utility(cell)
        return self.run_attack(cell)

    def run_baseline(self) -> CellOutput:
        """The no-information 'reconstruction': the mean image of the public split for every victim."""
        mean_image = self.data.public.x.mean(dim=0, keepdim=True)
        scores = []
        for batch in self.victims:
            guess = Reconstruction(images=mean_image.expand(len(batch), -1, -1, -1).clone())
            scores.append(self._score(guess, batch))
        return self._output(
            scores, grid=[torch.cat([b.x for b in self.victims]), torch.cat([s.matched for s in scores])]
        )

    def run_utility(self, cell: Cell) -> CellOutput:
        assert cell.model and cell.defense and cell.round is not None and cell.seed is not None
        trained = self.models.at_round(cell.model, cell.defense, cell.seed, cell.round)
        net, norm = trained.model, self.info.normalize
        test_acc = accuracy(net, self.data.test.to(self.device), normalize=norm)
        train_acc = accuracy(
            net, ImageSet(self.data.train.x, self.data.train.y).to(self.device), normalize=norm
        )
        metrics = {
            "accuracy": test_acc,
            "accuracy_train": train_acc,
            **trained.pipeline.privacy_spent(trained.client_steps),
        }
        seconds, updates = trained.client_time
        if updates:  # a measurement (wall time), for the leaderboard's cost column
            metrics["client_seconds"] = seconds / updates
        defended = [c for i, c in enumerate(self.models.clients) if self.config.fl.is_defended(i) and len(c)]
        sensitive = sensitive_subset(
            defended, self.config.metrics.sensitive, trained.pipeline.sensitive_samples
        )
        if sensitive is not None:
            metrics["accuracy_sensitive"] = accuracy(net, sensitive, normalize=norm)
            metrics["sensitive_samples"] = float(len(sensitive))
        return CellOutput(metrics=metrics, victims=[])

    def run_attack(self, cell: Cell) -> CellOutput:
        assert cell.model and cell.defense and cell.attack and cell.round is not None
        assert cell.seed is not None
        attack = create_attack(cell.attack.name, cell.attack.params)
        if isinstance(attack, HitajGAN):
            return run_feature_inference(self, cell, attack)
        if attack.fit_scope is not None:
            net, _ = self.models.fresh(cell.model, cell.defense, cell.seed)
            setting = FitSetting(
                self.info,
                self.data.public,
                self.models.clients,
                self.config.fl,
                net,
                {"name": cell.model.name, **cell.model.params},
                cell.seed,
                self.device,
                self.progress,
            )
            attack, used = fit_attack(attack, setting, self.cache)
            self.models.used.extend(u for u in used if u not in self.models.used)
        threat = ThreatModel(labels_known=self.config.attack.threat.labels_known)
        knowledge = ServerKnowledge(data_info=self.info, public=self.data.public)
        rounds = [cell.round + t for t in range(attack.rounds_observed)]
        trained = [self.models.at_round(cell.model, cell.defense, cell.seed, r) for r in rounds]
        victim_client = self.config.victims.client
        client = HonestClient(
            client_id=victim_client,
            dataset=self.models.clients[victim_client],
            local=self.config.victim_update,
            pipeline=trained[0].pipeline,
            info=self.info,
            public=self.models.public,
            seed=cell.seed,
            model_mode=self.config.attack.model_mode,
        )
        observations = [
            observe_victim(
                [t.model for t in trained],
                batch.to(self.device),
                client,
                threat=threat,
                rounds=rounds,
                server=attack,
                knowledge=knowledge,
                generators=[
                    seeded_generator(cell.seed, 17, k, t, device=self.device) for t in range(len(rounds))
                ],
            )
            for k, batch in enumerate(self.victims)
        ]
        seeds = [cell.seed * 100_003 + k for k in range(len(self.victims))]
        if attack.rounds_observed == 1:
            reconstructions = attack.reconstruct_many(
                [o.views[0] for o in observations], seeds=seeds, progress=self.progress
            )
        else:
            reconstructions = attack.reconstruct_many_from_rounds(
                [o.views for o in observations], seeds=seeds, progress=self.progress
            )
        scores: list[VictimScore] = []
        truths, defended_rows, victims_info = [], [], []
        for batch, observation, reconstruction in zip(
            self.victims, observations, reconstructions, strict=True
        ):
            defended_x = observation.trace.defended_x
            scores.append(self._score(reconstruction, batch, defended_x))
            truths.append(batch.x)
            defended_rows.append(defended_x.cpu() if defended_x is not None else batch.x)
            victims_info.append({"labels": batch.y.tolist(), **reconstruction.stats})
        grid = [torch.cat(truths)]
        defended = torch.cat(defended_rows)
        if not torch.equal(defended, grid[0]):
            grid.append(defended)
        grid.append(torch.cat([s.matched for s in scores]))
        return self._output(scores, grid=grid, extra=victims_info)

    def _score(
        self, reconstruction: Reconstruction, batch: ImageSet, defended: torch.Tensor | None = None
    ) -> VictimScore:
        return score_victim(
            reconstruction,
            batch.x,
            batch.y,
            sensitive=batch.sensitive,
            defended=defended,
            match_on=self.config.metrics.match_on,
            lpips=self.lpips,
        )

    def _output(
        self, scores: list[VictimScore], grid: list[torch.Tensor], extra: list[dict[str, Any]] | None = None
    ) -> CellOutput:
        metrics = aggregate(scores, self.config.metrics.asr_threshold)
        if "lpips" not in metrics:
            metrics["lpips_note"] = self.lpips_reason  # type: ignore[assignment]
        victims = [
            {**s.per_image, "label_acc": s.label_acc, **(extra[i] if extra else {})}
            for i, s in enumerate(scores)
        ]
        return CellOutput(metrics=metrics, victims=victims, grid_rows=grid)
