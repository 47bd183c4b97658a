"""The world of a text grid: the tokenized corpus and its client partition, the fixed victims, the
models the server builds (untrained, and trained by FL under each defense setting, cached) and the
victims' updates through the clients' defense pipeline — the same FL clients and defenses as images."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import nn

from leakshield.artifacts import Artifact, ArtifactCache, FitKey, data_fingerprint
from leakshield.defenses.base import ACCEPTED, DefensePipeline, Verdict
from leakshield.errors import ConfigError
from leakshield.experiment.config import DefenseSetting
from leakshield.fl import FederatedSimulation
from leakshield.fl.client import HonestClient, compute_update
from leakshield.seeds import seeded_generator
from leakshield.text.backbone import pretrained_model
from leakshield.text.dataset import TextData, TextInfo, TokenSet, load_text_data, partition_text, read_corpus
from leakshield.text.lora import AdapterClassifier
from leakshield.text.models import TextClassifier
from leakshield.text.tokenizer import text_fingerprint
from leakshield.text_grid.config import TextExperimentConfig, TextModelSpec

#: sequences scored per forward pass when measuring accuracy
EVAL_BATCH = 256
#: the key of the client guards' random streams
GUARD_STREAM = 0x6A2D
#: the prefix of the previous round's tensors in a trained model's artifact
PREVIOUS = "previous/"


@dataclass(frozen=True)
class Victim:
    """Victim ``index`` at one batch size: client ``client``'s batch (token ids, labels)."""

    index: int
    client: int
    batch: TokenSet


@dataclass(frozen=True)
class ModelState:
    """A model the server sends, with its test ``accuracy``, what training it cost (ε of DP-SGD) and
    ``previous``: the model of the round before, which the clients accepted then (None untrained: a
    client's first round has nothing to compare with)."""

    model: TextClassifier
    accuracy: float
    privacy: dict[str, float]
    previous: TextClassifier | None = None


class TextWorld:
    """Everything a text grid's cells share; built once per run."""

    def __init__(
        self,
        config: TextExperimentConfig,
        device: torch.device,
        *,
        progress: bool = False,
        cache: ArtifactCache | None = None,
    ) -> None:
        self.config, self.device, self.progress = config, device, progress
        self.cache = cache or ArtifactCache()
        c = config.corpus
        self.data: TextData = load_text_data(
            read_corpus(c.path, c.format),
            tokenizer_kind=config.tokenizer.kind,
            vocab_size=config.tokenizer.vocab_size,
            lowercase=config.tokenizer.lowercase,
            max_length=config.max_length,
            public_fraction=c.public_fraction,
            test_fraction=c.test_fraction,
            split_seed=c.split_seed,
            max_train=c.max_train,
            cache=self.cache,
        )
        parts = partition_text(self.data.groups, config.fl.clients, config.partition, config.partition_seed)
        self.clients = [self.data.train.subset(p) for p in parts]
        self.victims = {b: self._draw(b) for b in config.victims.batches}
        self._states: dict[tuple, ModelState] = {}

    @functools.cached_property
    def train_digest(self) -> str:
        """What the trained models depend on in the data: the encoded train split and its groups."""
        return text_fingerprint([data_fingerprint(self.data.train), *self.data.groups])  # type: ignore[arg-type]

    @property
    def info(self) -> TextInfo:
        return self.data.info

    @functools.cached_property
    def chance(self) -> float:
        """The test accuracy of always answering the most frequent test label (a model that learned
        nothing but the prior reaches it)."""
        labels = self.data.test.y
        return float(torch.bincount(labels).max()) / max(len(labels), 1)

    def _draw(self, batch: int) -> list[Victim]:
        """``victims.count`` batches of ``batch`` texts, victim i (from ``victims.offset`` on) from client
        i mod clients."""
        found = []
        first = self.config.victims.offset
        for i in range(first, first + self.config.victims.count):
            client = i % len(self.clients)
            data = self.clients[client]
            if len(data) < batch:
                raise ConfigError(
                    f"victims.batches: {batch} texts from client {client}, which holds {len(data)}"
                )
            gen = seeded_generator(self.config.victims.seed, batch, i)
            rows = torch.randperm(len(data), generator=gen)[:batch].sort().values
            found.append(Victim(i, client, data.subset(rows)))
        return found

    def pipeline(self, setting: DefenseSetting) -> DefensePipeline:
        return DefensePipeline.from_config(setting.entries)

    def pipeline_entries(self, setting: DefenseSetting, victim: Victim) -> list[dict]:
        """The defenses ``victim``'s client runs: the setting's, or none outside ``fl.defended_clients``."""
        return setting.entries if self.config.fl.is_defended(victim.client) else []

    def fresh_model(self, spec: TextModelSpec, setting: DefenseSetting, seed: int) -> TextClassifier:
        """The untrained model the server builds from ``seed`` (with the defenses' model stage)."""
        info = self.data.info
        net = TextClassifier(
            spec.name,
            info.vocab_size,
            info.max_length,
            info.num_classes,
            width=spec.width,
            layers=spec.layers,
            heads=spec.heads,
            seed=seed,
        )
        if spec.pretrain is not None:
            p = spec.pretrain
            net = pretrained_model(net, self.data.public.x, self.data.public.y, objective=p.objective,
                                   epochs=p.epochs, lr=p.lr, seed=seed, cache=self.cache,
                                   progress=self.progress)  # fmt: skip
        if spec.lora is not None:
            lora = spec.lora
            net = AdapterClassifier(net, rank=lora.rank, alpha=lora.alpha, targets=lora.targets,
                                    train_head=lora.train_head, seed=seed)  # fmt: skip
        return self.pipeline(setting).model_hook(net, seed=seed).to(self.device).eval()

    def state(self, spec: TextModelSpec, setting: DefenseSetting, state: str, seed: int) -> ModelState:
        """The model in ``state``: untrained, or trained by ``training.rounds`` FL rounds of ``fl`` under
        ``setting``'s defenses (cached on disk under everything that determines it)."""
        key = (spec.display, setting.display, state, seed)
        if key not in self._states:
            model = self.fresh_model(spec, setting, seed)
            privacy: dict[str, float] = {}
            previous = None
            if state == "trained":
                previous = self.fresh_model(spec, setting, seed)
                privacy = self._train(model, spec, setting, seed, previous)
            self._states[key] = ModelState(model.eval(), self.accuracy(model), privacy, previous)
        return self._states[key]

    def _train(
        self, model: nn.Module, spec: TextModelSpec, setting: DefenseSetting, seed: int, previous: nn.Module
    ) -> dict:
        """Train ``model`` in place (and load the round before into ``previous``); ε and δ spent."""
        config = self.config
        fl = (
            config.fl
            if setting.training is None
            else config.fl.model_copy(update={"local": setting.training})
        )
        params = {
            "model": spec.model_dump(mode="json", exclude={"label"}),
            "defenses": setting.entries,
            "fl": fl.model_dump(mode="json"),
            "rounds": config.training.rounds,
            "partition": [config.partition, config.partition_seed],
            "tokenizer": config.tokenizer.model_dump(mode="json"),
            "max_length": config.max_length,
            "corpus": config.corpus.model_dump(mode="json", exclude={"path"}),
            "kept": "final and previous round",
        }
        key = FitKey("text-fl-training", params, "client", self.train_digest, seed,
                     context={"device": self.device.type})  # fmt: skip

        def fit() -> Artifact:
            pipeline = self.pipeline(setting)
            sim = FederatedSimulation.honest(
                model,
                [c.to(self.device) for c in self.clients],
                fl,
                pipeline,
                self.data.info,
                public=self.data.public.to(self.device),
                seed=seed,
            )  # type: ignore[arg-type]
            rounds = config.training.rounds
            sim.run(rounds - 1, progress=self.progress, desc=f"FL training {setting.display}")
            before = {PREVIOUS + k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
            sim.run(1)
            spent: dict[str, float] = {}
            for defense in pipeline.defenses:
                spent.update(defense.privacy_spent(sim.client_steps, sim.participation))
            state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
            return Artifact({**state, **before}, {"privacy": spent})

        artifact = self.cache.get_or_fit(key, fit)
        final = {k: v for k, v in artifact.tensors.items() if not k.startswith(PREVIOUS)}
        before = {k.removeprefix(PREVIOUS): v for k, v in artifact.tensors.items() if k.startswith(PREVIOUS)}
        model.load_state_dict({k: v.to(self.device) for k, v in final.items()})
        previous.load_state_dict({k: v.to(self.device) for k, v in before.items()})
        previous.eval()
        return dict(artifact.metadata.get("privacy", {}))

    @torch.no_grad()
    def accuracy(self, model: nn.Module) -> float:
        """Share of the test split classified correctly."""
        test = self.data.test
        hits = 0
        for start in range(0, len(test), EVAL_BATCH):
            ids = test.x[start : start + EVAL_BATCH].to(self.device)
            hits += int((model(ids).argmax(1).cpu() == test.y[start : start + EVAL_BATCH]).sum())
        return hits / max(len(test), 1)

    def inspect(
        self, model: nn.Module, setting: DefenseSetting, victim: Victim, seed: int, previous: nn.Module | None
    ) -> Verdict:
        """The verdict of ``victim``'s client guards on the ``model`` it receives (``previous``: the
        honest model it accepted the round before, for the guards that compare; None: its first round);
        accepted without guards."""
        pipeline = DefensePipeline.from_config(self.pipeline_entries(setting, victim))
        if not pipeline.guards:
            return ACCEPTED
        client = HonestClient(
            victim.client,
            self.clients[victim.client].to(self.device),  # type: ignore[arg-type]
            self.config.update,
            pipeline,
            self.data.info,  # type: ignore[arg-type]
            public=self.data.public.to(self.device),  # type: ignore[arg-type]
            seed=seed,
            model_mode="eval",
        )
        stream = seeded_generator(seed, GUARD_STREAM, victim.index, device=self.device)
        return client.inspect(model, 0, stream, previous)

    def update(
        self, model: TextClassifier, setting: DefenseSetting, victim: Victim, seed: int
    ) -> tuple[dict[str, torch.Tensor], int]:
        """The victim's released update of its batch through ``setting``'s pipeline and the attacker's
        gradient estimate of it (FedSGD: the update; FedAvg: −Δθ / (lr · steps)), and the local steps."""
        local = self.config.update
        if local.algorithm == "fedsgd":
            local = local.model_copy(update={"batch_size": len(victim.batch)})
        update, _ = compute_update(
            model,
            victim.batch.to(self.device),
            local,
            DefensePipeline.from_config(self.pipeline_entries(setting, victim)),
            info=self.data.info,  # type: ignore[arg-type]
            generator=seeded_generator(seed, victim.index, len(victim.batch), device=self.device),
            public=self.data.public.to(self.device),
            pool=self.clients[victim.client].to(self.device),  # type: ignore[arg-type]
            model_mode="eval",
            client_id=victim.client,
        )
        steps = update.protocol.local_steps
        if local.algorithm == "fedsgd":
            return dict(update.delta), steps
        return {k: -v / (local.local_lr * steps) for k, v in update.delta.items()}, steps
