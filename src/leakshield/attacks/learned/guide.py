"""``guide``: a diffusion prior that denoises what another attack recovers (GUIDE, Carletti, Foggia,
Mazzocca, Parrella & Vento, arXiv 2510.17621, 2025: a diffusion model trained on surrogate data
post-processes any attack's output).

A class-conditional DDPM (:mod:`leakshield.generative.diffusion`) is trained once on the public split (a
fitted artifact). For each victim the base ``attack`` runs first; its images are noised to step
``strength``·T and denoised back with the victim's labels (SDEdit, Meng et al., ICLR 2022): what the
reconstruction shares with real digits survives, the base attack's artefacts and noise are replaced.
With ``guidance`` each denoising step is also steered by the update (diffusion posterior sampling, Chung
et al., ICLR 2023; GG-CDM, arXiv 2511.10423, conditions a diffusion model on the noised gradient this
way). ``diffusion-posterior`` is that alone: no base attack, each victim drawn from noise for its labels
with every step steered by the update.

The reference a victim's score must beat is the same procedure on someone else's batch with the
victim's labels, with the same noise: the base attack's own placebos (the learned inverter's outputs on
public batches' updates) denoised alike; for a base attack without them, public images of the labels
denoised alike (what a perfect attack on their updates would give); for ``diffusion-posterior``, draws
steered by public batches' updates through the same defenses. The scorer keeps the best of them, so an
output that carries only the labels does not count as a leak.

Threat model: the base attack's, with the public split (the DDPM's training data) added.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import pydantic
import torch

from leakshield.artifacts import Artifact, FitData, FitKey, data_fingerprint
from leakshield.attacks.base import ATTACKS, Attack, Reconstruction, create_attack
from leakshield.attacks.learned.attack import PublicSplit
from leakshield.attacks.learned.pairs import PLACEBO_STREAM, defended_update, placebo_batch, public_pipeline
from leakshield.attacks.passive.inversion.objectives import cosine_distance
from leakshield.attacks.passive.inversion.replay import dummy_update
from leakshield.attacks.passive.labels import resolve_labels
from leakshield.errors import ConfigError
from leakshield.fl.types import PreparedModel, ServerKnowledge, ServerView
from leakshield.generative.diffusion import Denoiser, Guidance, sample, train_denoiser
from leakshield.registry import Params
from leakshield.seeds import seeded_generator
from leakshield.threats import PRIOR_OBSERVER, Knowledge, Threat

REFERENCE = (
    "Carletti, Foggia, Mazzocca, Parrella & Vento, GUIDE: Enhancing Gradient Inversion Attacks in Federated "
    "Learning with Denoising Models, arXiv 2510.17621"
)
DIFFUSION_FIELDS = (
    "diffusion_steps",
    "diffusion_width",
    "diffusion_timesteps",
    "diffusion_batch",
    "diffusion_lr",
)


class GuideParams(Params):
    """attack: the base attack whose images are denoised (one without a fit of its own: the learned
    inverter, IG, the noise-aware attack…; None: none, the images are drawn from noise, which only
    ``guidance`` ties to the update). attack_params: its parameters. strength: the fraction of the
    diffusion's steps the images are noised to before denoising (0.3: keep most of what the attack
    found; 1: a fresh draw of the label). diffusion_steps: Adam steps of the DDPM on the public split.
    diffusion_width: channels of its first scale (2, 4 or a multiple of 8). diffusion_timesteps: its T.
    diffusion_batch: its minibatch. diffusion_lr: its step size. guidance: above 0, each denoising step
    also descends the cosine distance between the update of its denoised estimate and the observed one
    (diffusion posterior sampling, as GG-CDM conditions on the gradient), by a step of that RMS per pixel
    in the model's [−1, 1] units; 0: denoising alone (GUIDE). placebos: public batches with the
    victim's labels whose outputs form the reference, when the base attack brings none of its own."""

    attack: str | None = "learned-inversion"
    attack_params: dict[str, Any] = pydantic.Field(default_factory=dict)
    strength: float = pydantic.Field(default=0.3, gt=0, le=1)
    diffusion_steps: int = pydantic.Field(default=1500, ge=1)
    diffusion_width: int = pydantic.Field(default=16, ge=2)
    diffusion_timesteps: int = pydantic.Field(default=100, ge=2)
    diffusion_batch: int = pydantic.Field(default=64, ge=1)
    diffusion_lr: float = pydantic.Field(default=2e-3, gt=0)
    guidance: float = pydantic.Field(default=0.0, ge=0)
    placebos: int = pydantic.Field(default=4, ge=1)

    @pydantic.field_validator("diffusion_width")
    @classmethod
    def _width_fits_group_norm(cls, value: int) -> int:
        if value not in (2, 4) and value % 8:
            raise ValueError(f"{value}: 2, 4 or a multiple of 8 (the U-Net's group norms split its channels)")
        return value

    def check_data(self, shape: tuple[int, int, int], num_classes: int) -> None:
        if shape[1] % 2 or shape[2] % 2:
            raise ValueError(
                f"diffusion_width: the diffusion prior's U-Net halves the images; their sides "
                f"must be even, not {shape[1]}×{shape[2]}"
            )


def update_matching(view: ServerView, labels: torch.Tensor) -> Guidance:
    """The guidance loss of :class:`GuideParams` ``guidance``: 1 − cos between the update the images
    (pixels) would give on the model sent and the observed update, over every parameter it holds."""
    model = view.model
    names = [n for n, _ in model.named_parameters() if n in view.update.delta]
    device = next(model.parameters()).device
    target = [view.update.delta[n].to(device) for n in names]

    def distance(images: torch.Tensor) -> torch.Tensor:
        x = view.data_info.normalize(images.to(device))
        dummy, _ = dummy_update(model, names, x, labels.to(device), view)
        return cosine_distance(dummy, target).cpu()

    return distance


class DiffusionDenoise(Attack):
    """GUIDE: see the module docstring; parameters :class:`GuideParams`."""

    params: GuideParams
    fit_scope = "public"
    fit_budget = "diffusion_steps"

    def __init__(self, params: Params) -> None:
        super().__init__(params)
        base = self._base()
        if base is not None and (
            base.fit_scope is not None or base.rounds_observed != 1 or base.threat.modifies_model
        ):
            raise ConfigError(
                f"guide: attack {self.params.attack!r} must be a single-round attack without a "
                "fit of its own that sends the model unchanged (e.g. learned-inversion, ig, "
                "noise-aware)"
            )
        if base is not None and self.params.guidance:
            raise ConfigError(
                "guide: guidance steers draws without a base attack (attack: null, as diffusion-posterior); "
                "with one, its placebos' denoising could not be steered alike"
            )
        if base is None and not self.params.guidance:
            raise ConfigError(
                "guide: attack None draws from noise; give guidance > 0 (the update's only way in)"
            )

    def _base(self) -> Attack | None:
        if self.params.attack is None:
            return None
        return create_attack(self.params.attack, self.params.attack_params, self.execution.model_dump())

    @property
    def threat(self) -> Threat:
        base = self._base()
        if base is None:
            return PRIOR_OBSERVER
        known = base.threat
        return Threat(
            known.adversary,
            frozenset({*known.knowledge, Knowledge.PUBLIC_SPLIT}),
            known.rounds,
            known.secure_aggregation,
        )

    def fit(self, data: FitData) -> Artifact:
        p = self.params
        if not len(data.data):
            raise ConfigError(
                "guide: needs the public split to train its diffusion prior; set "
                "dataset.public_fraction above 0"
            )
        fields = {name: getattr(p, name) for name in DIFFUSION_FIELDS}
        key = FitKey(
            "guide:diffusion",
            fields,
            "public",
            data_fingerprint(data.data),
            data.seed,
            context={"shape": list(data.info.shape), "classes": data.info.num_classes},
        )

        def fit() -> Artifact:
            model, stats = train_denoiser(
                data.data.x.cpu(),
                data.data.y.cpu(),
                data.info.num_classes,
                timesteps=p.diffusion_timesteps,
                steps=p.diffusion_steps,
                batch=p.diffusion_batch,
                lr=p.diffusion_lr,
                width=p.diffusion_width,
                seed=data.seed,
                progress=data.progress,
            )
            return Artifact({k: v.detach().cpu() for k, v in model.state_dict().items()}, stats)

        return data.cache.get_or_fit(key, fit) if data.cache is not None else fit()

    def denoiser(self, channels: int, classes: int) -> Denoiser:
        if self.artifact is None:
            raise RuntimeError(
                f"{self.name} needs its diffusion prior: fit it on the public split first "
                "(attack.with_artifact(attack.fit(...)))"
            )
        model = Denoiser(channels, classes, self.params.diffusion_width)
        model.load_state_dict(dict(self.artifact.tensors))
        return model.eval().requires_grad_(False)

    def _reference(
        self,
        view: ServerView,
        base: Reconstruction | None,
        labels: torch.Tensor,
        seed: int,
        denoised: Callable[[torch.Tensor | None, Guidance | None], torch.Tensor],
    ) -> torch.Tensor:
        """What the victim's images must beat: the same procedure on someone else's batch of the same
        labels. The base attack's own placebos denoised alike; without them, ``placebos`` public batches
        with the victim's labels: denoised alike from their images (what a perfect base attack would
        give on their updates), or, without a base attack, sampled under the guidance of their updates
        computed through the same defenses."""
        batch = len(labels)
        if base is not None and base.prior is not None:
            return torch.cat([denoised(chunk, None) for chunk in base.prior.split(batch)])
        if not isinstance(view.secrets, PublicSplit):
            raise ConfigError(
                f"{self.name}: the view holds no public split for the reference's placebos; "
                "the server keeps it when it prepares the model (prepare_model)"
            )
        public, draw = view.secrets.images, seeded_generator(PLACEBO_STREAM, seed)
        device = next(view.model.parameters()).device
        found = []
        for k in range(self.params.placebos):
            placebo = placebo_batch(public, labels, draw)
            if base is not None:
                found.append(denoised(placebo.x, None))
                continue
            delta = defended_update(
                view.model,
                placebo,
                view.update.protocol,
                public_pipeline(view.defenses),
                view.data_info,
                public,
                seeded_generator(PLACEBO_STREAM, seed, k, device=device),
            )
            other = dataclasses.replace(view, update=dataclasses.replace(view.update, delta=delta))
            found.append(denoised(None, update_matching(other, labels)))
        return torch.cat(found)

    def prepare_model(self, model: torch.nn.Module, knowledge: ServerKnowledge) -> PreparedModel:
        base = self._base()
        prepared = base.prepare_model(model, knowledge) if base is not None else PreparedModel(model)
        if prepared.secrets is None:  # the public split, for the placebos of the reference
            return PreparedModel(prepared.model, PublicSplit(knowledge.public))
        return prepared

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction:
        return self.reconstruct_many([view], seeds=[seed])[0]

    def reconstruct_many(
        self, views: Sequence[ServerView], *, seeds: Sequence[int], progress: bool = False
    ) -> list[Reconstruction]:
        if len(views) != len(seeds):
            raise ValueError(f"{len(views)} views but {len(seeds)} seeds")
        if not views:
            return []
        base_attack = self._base()
        found: Sequence[Reconstruction | None] = (
            base_attack.reconstruct_many(views, seeds=seeds, progress=progress)
            if base_attack is not None
            else [None] * len(views)
        )
        info = views[0].data_info
        model = self.denoiser(info.shape[0], info.num_classes)
        start = max(1, round(self.params.strength * self.params.diffusion_timesteps))
        results = []
        for view, seed, base in zip(views, seeds, found, strict=True):
            begin = time.perf_counter()
            batch = view.batch_size
            labels = base.labels if base is not None else None
            if labels is None:
                labels, _ = resolve_labels(view, "auto", torch.device("cpu"))
                assert labels is not None
            labels = labels[:batch].cpu()

            def denoised(
                images: torch.Tensor | None,
                matching: Guidance | None,
                labels: torch.Tensor = labels,
                seed: int = seed,
            ) -> torch.Tensor:
                # every call draws the same noise: the images and the reference are denoised alike
                return sample(
                    model,
                    labels,
                    self.params.diffusion_timesteps,
                    size=info.shape[1:],
                    generator=torch.Generator().manual_seed(seed),
                    images=images,
                    start=start,
                    guidance=matching,
                    scale=self.params.guidance,
                )

            steered = update_matching(view, labels) if self.params.guidance else None
            images = denoised(base.images[:batch] if base is not None else None, steered)
            reference = self._reference(view, base, labels, seed, denoised)
            stats = {
                **(base.stats if base is not None else {}),
                "guide_seconds": time.perf_counter() - begin,
                "guide_start": float(start),
            }
            results.append(
                Reconstruction(
                    images=images,
                    labels=labels,
                    stats=stats,
                    normalized=info.normalize(images),
                    prior=reference,
                )
            )
        return results


ATTACKS.register(
    "guide",
    summary="adaptive vs noise, DP, pruning, quantization, Soteria, PRECODE, learning: a class-conditional "
    "DDPM on the public split denoises another attack's images "
    "(SDEdit from 30 % of its 100 steps); default base: learned-inversion; diffusion-posterior: no base, "
    "every step of a draw from noise steered down the update's cosine distance (DPS, step 0.02)",
    reference=f"{REFERENCE}; Meng et al., SDEdit, ICLR 2022; Ho et al., DDPM, NeurIPS 2020",
    params=GuideParams,
    threat=ATTACKS.get("learned-inversion").threat,
    targets=ATTACKS.get("learned-inversion").targets,
    aliases={"diffusion-posterior": {"attack": None, "strength": 1.0, "guidance": 0.02}},
)(DiffusionDenoise)
