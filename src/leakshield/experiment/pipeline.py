"""The one pipeline of DESIGN.md that every cell runs through: data → model (defense model stage) →
FL training to the attacked round → victim update through the client stages → ServerView → attack →
evaluator. No defense or attack has a private code path here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from leakshield.attacks.base import Attack, Reconstruction, ServerKnowledge, create_attack
from leakshield.data import ImageSet, load_dataset, partition_indices
from leakshield.defenses.base import DefensePipeline, FitContext
from leakshield.defenses.sensitivity import SensitiveSamples
from leakshield.errors import LeakshieldError
from leakshield.experiment.cells import Cell
from leakshield.experiment.config import Component, DefenseSetting, ExperimentConfig
from leakshield.experiment.evaluation import VictimScore, aggregate, score_victim
from leakshield.fl import (
    ClientTrace,
    FederatedSimulation,
    ServerView,
    ThreatModel,
    build_server_view,
    compute_update,
)
from leakshield.fl.simulation import seeded_generator
from leakshield.metrics.lpips import LPIPS, load_lpips
from leakshield.metrics.utility import accuracy
from leakshield.models import create_model


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
    """Per-run shared state: data splits, client partition, the fixed victims, LPIPS, a model cache."""

    def __init__(self, config: ExperimentConfig, device: torch.device, progress: bool = False) -> None:
        self.config = config
        self.device = device
        self.progress = progress
        ds = config.dataset
        self.data = load_dataset(ds.name, ds.params, root=ds.root)
        self.info = self.data.info
        labels = self.data.train.y
        parts = partition_indices(labels, config.fl.clients, config.fl.partition, config.partition_seed)
        self.clients = [self.data.train.subset(p) for p in parts]
        self.clients_on_device = [ImageSet(c.x.to(device), c.y.to(device)) for c in self.clients]
        self.victims = self._draw_victims()
        self.lpips, self.lpips_reason = self._load_lpips()
        self._models: dict[tuple, tuple[dict[str, torch.Tensor], DefensePipeline, dict]] = {}

    def _draw_victims(self) -> list[ImageSet]:
        v = self.config.victims
        if v.client >= len(self.clients):
            raise LeakshieldError(f"victims.client: {v.client} but there are {len(self.clients)} clients")
        pool = self.clients[v.client]
        need = v.count * v.batch_size
        if need > len(pool):
            raise LeakshieldError(
                f"victims: {v.count} batches × {v.batch_size} images = {need} exceed the "
                f"{len(pool)} training images of client {v.client}"
            )
        gen = torch.Generator().manual_seed(v.seed)
        if v.sensitive is None:
            order = torch.randperm(len(pool), generator=gen)[:need]
            return [pool.subset(order[i * v.batch_size : (i + 1) * v.batch_size]) for i in range(v.count)]
        assert self.config.metrics.sensitive is not None
        mask = SensitiveSamples(self.config.metrics.sensitive).of_dataset(pool)
        sensitive, other = mask.nonzero().flatten(), (~mask).nonzero().flatten()
        k = v.sensitive
        if v.count * k > len(sensitive) or v.count * (v.batch_size - k) > len(other):
            raise LeakshieldError(
                f"victims: {v.count} batches with {k} sensitive images each need {v.count * k} sensitive "
                f"and {v.count * (v.batch_size - k)} other images; client {v.client} has "
                f"{len(sensitive)} and {len(other)}"
            )
        sensitive = sensitive[torch.randperm(len(sensitive), generator=gen)]
        other = other[torch.randperm(len(other), generator=gen)]
        batches = []
        for i in range(v.count):
            rest = other[i * (v.batch_size - k) : (i + 1) * (v.batch_size - k)]
            idx = torch.cat([rest, sensitive[i * k : (i + 1) * k]])  # sensitive last
            flags = torch.arange(v.batch_size) >= v.batch_size - k
            batch = pool.subset(idx)
            batches.append(ImageSet(batch.x, batch.y, flags))
        return batches

    def _load_lpips(self) -> tuple[LPIPS | None, str]:
        cfg = self.config.metrics.lpips
        if cfg.weights is None:
            return None, "n/a: no LPIPS weights file given (metrics.lpips.weights)"
        try:
            return load_lpips(cfg.net, cfg.weights).to(self.device), ""
        except LeakshieldError as exc:
            return None, f"n/a: {exc}"

    # -- models --------------------------------------------------------------------------------------
    def model_at_round(
        self, model: Component, defense: DefenseSetting, seed: int, rounds: int
    ) -> tuple[nn.Module, DefensePipeline]:
        """The global model after ``rounds`` FL rounds under ``defense`` (continuing from the latest
        cached round of the same model, defense and seed; the simulation is seeded per round)."""
        net, pipeline, _ = self._trained(model, defense, seed, rounds)
        return net, pipeline

    def _trained(
        self, model: Component, defense: DefenseSetting, seed: int, rounds: int
    ) -> tuple[nn.Module, DefensePipeline, dict[int, tuple[int, float]]]:
        base_key = (model.display, defense.display, seed)
        cached = [key[3] for key in self._models if key[:3] == base_key and key[3] <= rounds]
        pipeline = DefensePipeline.from_config(defense.entries)
        net = create_model(
            model.name, model.params, in_shape=self.info.shape, num_classes=self.info.num_classes, seed=seed
        )
        net = pipeline.model_hook(net, seed=seed).to(self.device)
        start = 0
        client_steps: dict[int, tuple[int, float]] = {}
        if cached:
            start = max(cached)
            state, pipeline, client_steps = self._models[(*base_key, start)]
            net.load_state_dict(state)
        else:
            pipeline.fit(FitContext(data=self.data, device=self.device, seed=seed))
        if rounds > start:
            sim = FederatedSimulation(
                net, self.clients_on_device, self.config.fl, pipeline, self.info, seed=seed
            )
            sim.round = start
            sim.client_steps = dict(client_steps)
            sim.run(rounds - start, progress=self.progress, desc=f"FL rounds {start}→{rounds}")
            client_steps = sim.client_steps
        state = {k: v.detach().clone() for k, v in net.state_dict().items()}
        self._models[(*base_key, rounds)] = (state, pipeline, dict(client_steps))
        return net, pipeline, client_steps

    # -- cells ---------------------------------------------------------------------------------------
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
            scores.append(
                score_victim(
                    guess,
                    batch.x,
                    batch.y,
                    sensitive=batch.sensitive,
                    match_on=self.config.metrics.match_on,
                    lpips=self.lpips,
                )
            )
        return self._output(
            scores, grid=[torch.cat([b.x for b in self.victims]), torch.cat([s.matched for s in scores])]
        )

    def run_utility(self, cell: Cell) -> CellOutput:
        assert cell.model and cell.defense and cell.round is not None and cell.seed is not None
        net, pipeline, client_steps = self._trained(cell.model, cell.defense, cell.seed, cell.round)
        norm = self.info.normalize
        test_acc = accuracy(
            net, ImageSet(self.data.test.x.to(self.device), self.data.test.y.to(self.device)), normalize=norm
        )
        train = self.data.train
        train_acc = accuracy(net, ImageSet(train.x.to(self.device), train.y.to(self.device)), normalize=norm)
        metrics = {"accuracy": test_acc, "accuracy_train": train_acc, **pipeline.privacy_spent(client_steps)}
        sensitive = self._sensitive_samples(pipeline)
        if sensitive is not None:
            metrics["accuracy_sensitive"] = accuracy(net, sensitive, normalize=norm)
            metrics["sensitive_samples"] = float(len(sensitive))
        return CellOutput(metrics=metrics, victims=[])

    def _sensitive_samples(self, pipeline: DefensePipeline) -> ImageSet | None:
        """The sensitive training samples of the defended clients, by ``metrics.sensitive`` or else by
        the defense's own rule; None when neither defines them."""
        rule = self.config.metrics.sensitive
        fl = self.config.fl
        chosen = [c for i, c in enumerate(self.clients_on_device) if fl.is_defended(i) and len(c)]
        parts = []
        for client in chosen:
            mask = SensitiveSamples(rule).of_dataset(client) if rule else pipeline.sensitive_mask(client)
            if mask is None:
                return None
            parts.append(client.subset(mask.nonzero().flatten()))
        if not parts:
            return None
        return ImageSet(torch.cat([p.x for p in parts]), torch.cat([p.y for p in parts]))

    def run_attack(self, cell: Cell) -> CellOutput:
        assert cell.model and cell.defense and cell.attack and cell.round is not None
        assert cell.seed is not None
        attack = create_attack(cell.attack.name, cell.attack.params)
        threat = ThreatModel(labels_known=self.config.attack.threat.labels_known)
        knowledge = ServerKnowledge(data_info=self.info, public=self.data.public)
        observations = [
            self._observe(
                cell,
                attack,
                k,
                ImageSet(batch.x.to(self.device), batch.y.to(self.device), batch.sensitive),
                threat,
                knowledge,
            )
            for k, batch in enumerate(self.victims)
        ]
        seeds = [cell.seed * 100_003 + k for k in range(len(self.victims))]
        if attack.rounds_observed == 1:
            first_views = [views[0] for views, _ in observations]
            reconstructions = attack.reconstruct_many(first_views, seeds=seeds, progress=self.progress)
        else:
            reconstructions = attack.reconstruct_many_from_rounds(
                [views for views, _ in observations], seeds=seeds, progress=self.progress
            )
        scores: list[VictimScore] = []
        truths, defended_rows, victims_info = [], [], []
        for batch, (_, trace), reconstruction in zip(
            self.victims, observations, reconstructions, strict=True
        ):
            score = score_victim(
                reconstruction,
                batch.x,
                batch.y,
                sensitive=batch.sensitive,
                defended=trace.defended_x,
                match_on=self.config.metrics.match_on,
                lpips=self.lpips,
            )
            scores.append(score)
            truths.append(batch.x)
            defended_rows.append(trace.defended_x.cpu() if trace.defended_x is not None else batch.x)
            victims_info.append({"labels": batch.y.tolist(), **reconstruction.stats})
        grid = [torch.cat(truths)]
        defended = torch.cat(defended_rows)
        if not torch.equal(defended, grid[0]):
            grid.append(defended)
        grid.append(torch.cat([s.matched for s in scores]))
        return self._output(scores, grid=grid, extra=victims_info)

    def _observe(
        self,
        cell: Cell,
        attack: Attack,
        k: int,
        private: ImageSet,
        threat: ThreatModel,
        knowledge: ServerKnowledge,
    ) -> tuple[list[ServerView], ClientTrace]:
        """The victim's updates on its private batch over the rounds the attack watches (the federation
        trains one round between two observations), as the server's views, and the client's trace."""
        assert cell.model and cell.defense and cell.round is not None and cell.seed is not None
        views, traces = [], []
        for t in range(attack.rounds_observed):
            honest, pipeline = self.model_at_round(cell.model, cell.defense, cell.seed, cell.round + t)
            net = attack.prepare_model(honest, knowledge)  # a malicious server may modify it
            update, trace = compute_update(
                net,
                private,
                self.config.victim_update,
                pipeline,
                normalize=self.info.normalize,
                generator=seeded_generator(cell.seed, 17, k, t, device=self.device),
                model_mode=self.config.attack.model_mode,
                pool=self.clients_on_device[self.config.victims.client],
            )
            views.append(
                build_server_view(
                    net,
                    update,
                    self.info,
                    threat,
                    labels=private.y,
                    defenses=pipeline.public_config(),
                    round=cell.round + t,
                )
            )
            traces.append(trace)
        return views, traces[0]

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
