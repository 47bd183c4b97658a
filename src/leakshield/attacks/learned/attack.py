"""``learned-inversion``: the learned inverter of Wu et al. (UAI 2023) as an adaptive attack.

For each model the server sent (the victims of one cell share it), the attacker computes ``pairs``
updates of public batches through the defenses rebuilt from their public parameters, exactly as the
victim's protocol facts state (:mod:`.pairs`), trains the inverter (:mod:`.inverter`) and inverts each
victim's update in one forward pass; ``refine`` then runs an inversion attack (IG, the noise-aware
attack) from that output for ``refine_steps``. The trained inverter is a fitted artifact in the run's
cache, keyed by the model's weights, the defenses' public configuration, the protocol, the public split,
the parameters and the code, so stage 2's fresh victims and reruns reuse it.

The reference a victim's images must beat (``prior``) is the inverter's output on ``placebos`` updates of
public batches with the victim's labels, through the same defenses: someone else's update. The scorer
keeps the best-matching of them, so an inverter that reads only the labels (at high noise it returns
about the class mean) does not count as leaking.

Threat model: an honest-but-curious server that holds the public split and knows the defenses' public
parameters (Kerckhoffs). It never sees a victim's image: its training pairs are public images.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import pydantic
import torch

from leakshield.artifacts import Artifact, ArtifactCache, FitKey, data_fingerprint
from leakshield.attacks.adaptive.dcs2 import ClassMeanImages
from leakshield.attacks.base import ATTACKS, Attack, Reconstruction, create_attack
from leakshield.attacks.learned.inverter import InverterMLP, train_inverter
from leakshield.attacks.learned.pairs import (
    PLACEBO_STREAM,
    UpdateSketch,
    defended_update,
    label_block,
    make_pairs,
    placebo_batch,
    public_pipeline,
)
from leakshield.attacks.passive.labels import resolve_labels
from leakshield.code_graph import installed_graph
from leakshield.data.types import ImageSet
from leakshield.errors import ConfigError
from leakshield.fl.types import PreparedModel, ServerKnowledge, ServerSecrets, ServerView
from leakshield.registry import Params
from leakshield.seeds import seeded_generator
from leakshield.threats import ADAPTIVE_PRIOR_OBSERVER

REFERENCE = (
    "Wu, Chen, Guo & Weinberger, Learning to Invert: Simple Adaptive Attacks for Gradient Inversion in "
    "Federated Learning, UAI 2023"
)


@dataclass(frozen=True)
class PublicSplit(ServerSecrets):
    """The public split, kept by a server that trains on it after seeing the update."""

    images: ImageSet


class LearnedInversionParams(Params):
    """pairs: public (defended update, image) pairs the inverter trains on. epochs, batch, lr: its Adam
    training on the pixel MSE. hidden: units of each of its two hidden layers. sketch_dim: numbers the
    count sketch keeps of the update (the whole update when it is smaller). labels: ``auto`` (known if
    the threat model grants them, else inferred), ``known``, ``infer``. refine: an inversion attack run
    from the inverter's images (None: the forward pass alone); refine_steps: its iterations.
    through_defense: the pairs pass through the defenses (false: clean updates, the ablation of an
    attacker that ignores the defense). placebos: public batches with the victim's labels whose updates,
    through the same defenses, the attack also inverts: the best of them is the victim's reference
    (0: the public class mean of each label). seed: the pairs' draws and the inverter's initialisation."""

    pairs: int = pydantic.Field(default=2000, ge=2)
    epochs: int = pydantic.Field(default=10, ge=1)
    batch: int = pydantic.Field(default=64, ge=1)
    lr: float = pydantic.Field(default=1e-3, gt=0)
    hidden: int = pydantic.Field(default=256, ge=1)
    sketch_dim: int = pydantic.Field(default=1024, ge=1)
    labels: Literal["auto", "known", "infer"] = "auto"
    refine: Literal["ig", "noise-aware", "pruning-aware", "soteria-bypass", "precode-expectation"] | None = (
        None
    )
    refine_steps: int = pydantic.Field(default=0, ge=0)
    placebos: int = pydantic.Field(default=4, ge=0)
    through_defense: bool = True
    seed: int = 0

    @pydantic.model_validator(mode="after")
    def _refine_has_steps(self) -> LearnedInversionParams:
        if (self.refine is None) != (self.refine_steps == 0):
            raise ValueError("refine and refine_steps go together: name the attack and give it steps > 0")
        return self


@functools.cache
def learned_code() -> str:
    """16 hex digits over this module's import closure (the pairs, the inverter, the client, the
    defenses): an inverter fitted by other code is refitted, never loaded."""
    closure = installed_graph().closure([__name__])
    return hashlib.sha256(json.dumps(sorted(closure.values())).encode()).hexdigest()[:16]


def weights_digest(model: torch.nn.Module) -> str:
    """SHA-256 of a model's state (names, shapes, values): the model an inverter was trained for."""
    digest = hashlib.sha256()
    for name, value in model.state_dict().items():
        t = value.detach().cpu().contiguous()
        digest.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def class_template(public: ImageSet, labels: torch.Tensor) -> torch.Tensor:
    """The public split's mean image of each label (its overall mean for a label it lacks): the best
    guess in squared error from the labels alone (``placebos: 0``)."""
    classes = int(max(public.y.max(), labels.max())) + 1
    return ClassMeanImages.of(public, classes)(labels)


class LearnedInversion(Attack):
    """See the module docstring; parameters :class:`LearnedInversionParams`."""

    params: LearnedInversionParams
    probe_budget = "pairs"

    def prepare_model(self, model: torch.nn.Module, knowledge: ServerKnowledge) -> PreparedModel:
        return PreparedModel(model, PublicSplit(knowledge.public))

    def inverter_key(self, view: ServerView, public: ImageSet) -> FitKey:
        """The cache key of the inverter for ``view``'s model, defenses and protocol."""
        fields = self.params.model_dump(
            mode="json", exclude={"refine", "refine_steps", "placebos", "labels", "seed"}
        )
        defenses = [[d.name, d.params.model_dump(mode="json")] for d in view.defenses]
        context = {
            "model": weights_digest(view.model),
            "defenses": defenses,
            "protocol": asdict(view.update.protocol),
            "shape": list(view.data_info.shape),
            "classes": view.data_info.num_classes,
            "code": learned_code(),
        }
        return FitKey(
            "attack:learned-inversion",
            fields,
            "public",
            data_fingerprint(public),
            self.params.seed,
            context=context,
        )

    def inverter(
        self, view: ServerView, progress: bool = False
    ) -> tuple[InverterMLP, UpdateSketch, Artifact]:
        """The inverter for ``view``'s model (trained, or loaded from the run's cache)."""
        if not isinstance(view.secrets, PublicSplit):
            raise ConfigError(
                f"{self.name}: the view holds no public split; the server keeps it when it "
                "prepares the model (prepare_model)"
            )
        if view.clients > 1:
            raise ConfigError(
                f"{self.name}: the update is a secure aggregate of {view.clients} clients; the "
                "inverter is trained on one client's update"
            )
        p, public = self.params, view.secrets.images
        shapes = [(n, v.shape) for n, v in view.model.named_parameters() if n in view.update.delta]
        sketch = UpdateSketch(shapes, p.sketch_dim, p.seed)
        pipeline = public_pipeline(view.defenses if p.through_defense else ())

        def fit() -> Artifact:
            start = time.perf_counter()
            pairs = make_pairs(
                view.model,
                public,
                view.update.protocol,
                pipeline,
                view.data_info,
                sketch,
                count=p.pairs,
                seed=p.seed,
                progress=progress,
            )
            made = time.perf_counter() - start
            f, stats = train_inverter(
                pairs, hidden=p.hidden, epochs=p.epochs, batch=p.batch, lr=p.lr, seed=p.seed
            )
            return Artifact(
                {k: v.detach().cpu() for k, v in f.state_dict().items()},
                {**stats, "pairs_seconds": made, "features": int(pairs.inputs.shape[1])},
            )

        cache_dir = self.execution.calibration_dir
        key = self.inverter_key(view, public)
        artifact = ArtifactCache(cache_dir).get_or_fit(key, fit) if cache_dir is not None else fit()
        features = sketch.dim + view.batch_size * view.data_info.num_classes
        f = InverterMLP(features, (view.batch_size, *view.data_info.shape), p.hidden)
        f.load_state_dict(dict(artifact.tensors))
        return f.eval(), sketch, artifact

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction:
        return self.reconstruct_many([view], seeds=[seed])[0]

    def reconstruct_many(
        self, views: Sequence[ServerView], *, seeds: Sequence[int], progress: bool = False
    ) -> list[Reconstruction]:
        if len(views) != len(seeds):
            raise ValueError(f"{len(views)} views but {len(seeds)} seeds")
        found: dict[str, tuple[InverterMLP, UpdateSketch, Artifact]] = {}
        results = []
        for view, seed in zip(views, seeds, strict=True):
            start = time.perf_counter()
            public = view.secrets.images if isinstance(view.secrets, PublicSplit) else None
            digest = self.inverter_key(view, public).digest if public is not None else ""
            if digest not in found:
                found[digest] = self.inverter(view, progress)
            f, sketch, artifact = found[digest]
            labels, source = resolve_labels(view, self.params.labels, next(view.model.parameters()).device)
            assert labels is not None and public is not None  # auto / known / infer always give labels
            images = self._inverted(f, sketch, view.update.delta, labels.cpu(), view.data_info.num_classes)
            reconstruction = (
                self._refined(view, images, seed)
                if self.params.refine
                else Reconstruction(
                    images=images, labels=labels.cpu(), normalized=view.data_info.normalize(images)
                )
            )
            stats: dict[str, Any] = {
                "labels_known": float(source == "known"),
                "heldout_mse": artifact.metadata.get("heldout_mse", float("nan")),
            }
            prior = self._placebos(view, f, sketch, public, labels.cpu(), seed)
            stats["seconds"] = time.perf_counter() - start
            results.append(
                Reconstruction(
                    images=reconstruction.images,
                    labels=reconstruction.labels,
                    stats={**reconstruction.stats, **stats},
                    normalized=reconstruction.normalized,
                    prior=prior,
                )
            )
        return results

    @staticmethod
    def _inverted(
        f: InverterMLP,
        sketch: UpdateSketch,
        delta: dict[str, torch.Tensor],
        labels: torch.Tensor,
        classes: int,
    ) -> torch.Tensor:
        """f's images of an update with ``labels``, in the labels' order (f gives them sorted)."""
        with torch.no_grad():
            images = f(torch.cat([sketch(delta), label_block(labels, classes)])[None])[0]
        in_order = torch.empty_like(images)
        in_order[labels.argsort(stable=True)] = images
        return in_order

    def _placebos(
        self,
        view: ServerView,
        f: InverterMLP,
        sketch: UpdateSketch,
        public: ImageSet,
        labels: torch.Tensor,
        seed: int,
    ) -> torch.Tensor:
        """The reference the victim's images must beat: the same attack on ``placebos`` updates of public
        batches with the victim's labels, computed through the same defenses (someone else's update);
        the scorer matches each victim image with the best of them. None asked: the class template."""
        p = self.params
        if p.placebos == 0:
            return class_template(public, labels)
        pipeline = public_pipeline(view.defenses)  # the victim's release, whatever the pairs saw
        device = next(view.model.parameters()).device
        draw = seeded_generator(PLACEBO_STREAM, seed)
        found = []
        for k in range(p.placebos):
            batch = placebo_batch(public, labels, draw)
            client_rng = seeded_generator(PLACEBO_STREAM, seed, k, device=device)
            delta = defended_update(
                view.model, batch, view.update.protocol, pipeline, view.data_info, public, client_rng
            )
            images = self._inverted(f, sketch, delta, labels, view.data_info.num_classes)
            if p.refine:
                placebo = dataclasses.replace(view, update=dataclasses.replace(view.update, delta=delta))
                images = self._refined(placebo, images, seed).images
            found.append(images)
        return torch.cat(found)

    def _refined(self, view: ServerView, start: torch.Tensor, seed: int) -> Reconstruction:
        """``refine`` for ``refine_steps`` from the inverter's images."""
        inner = create_attack(
            self.params.refine or "ig",
            {"iterations": self.params.refine_steps, "init": "image", "labels": self.params.labels},
            self.execution.model_dump(),
        )
        inner.init_images = start  # type: ignore[attr-defined]
        return inner.reconstruct(view, seed=seed)


ATTACKS.register(
    "learned-inversion",
    summary="adaptive vs noise, DP, pruning, quantization, Soteria, PRECODE, learning: an MLP trained on "
    "2,000 public (defended update, image) pairs made through the defense's public parameters, "
    "inverting each update in one forward pass (count sketch to 1,024); scored above its placebos",
    reference=f"{REFERENCE}, Sec. 3",
    params=LearnedInversionParams,
    threat=ADAPTIVE_PRIOR_OBSERVER,
    targets=(
        "gaussian-noise",
        "laplacian-noise",
        "dp-sgd",
        "clipping",
        "dp-fedavg",
        "pruning",
        "quantization",
        "soteria",
        "precode",
    ),
)(LearnedInversion)
