"""GGL — Generative Gradient Leakage (Li et al., CVPR 2022), its adaptive variant, and GIAS's
generator tuning (Jeon et al., NeurIPS 2021) as an option of the same attack.

The reconstruction is G(z*|y): a conditional generator trained on the public split (:mod:`.prior`),
conditioned on the victims' labels (known, or inferred from the last layer as in GGL), its latent found by
matching the observed update (:mod:`.search`). The adaptive variant lets the trial gradient pass through
the defense's public release transform before matching (GGL Sec. 3.3), with the same adaptations as the
adaptive image-space attacks of :mod:`leakshield.attacks.adaptive`: the noise's likelihood (Gaussian,
Laplacian, DP-SGD) or a scale-free cosine (clipping), only the released entries (pruning, quantization),
Soteria's defended layer dropped, an expectation over the randomness of dropout and PRECODE.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Literal

import pydantic
import torch

from leakshield.artifacts import Artifact, FitData
from leakshield.attacks.adaptive.inversion import find_defense, noise_adaptation, soteria_adaptation
from leakshield.attacks.base import ATTACKS, Attack, Reconstruction
from leakshield.attacks.passive.inversion.problem import layer_weight, matched_names, one_fedsgd_round
from leakshield.attacks.passive.labels import resolve_labels
from leakshield.attacks.prior.generator import (
    PRIOR_FIELDS,
    GeneratorPriorParams,
    build_generator,
    fitted_generator,
)
from leakshield.attacks.prior.search import (
    MappedLoss,
    Matching,
    adam_mapped,
    adam_one,
    cma_one,
    tune_generator,
)
from leakshield.fl.types import ServerView
from leakshield.threats import PRIOR_OBSERVER, Adversary, Knowledge, threat

REFERENCE = "Li et al., Auditing Privacy Defenses in FL via Generative Gradient Leakage, CVPR 2022"


class GGLParams(GeneratorPriorParams):
    """Matching, as in the inversion engine — distance: ``l2`` (GGL, averaged over layers), ``l1`` or
    ``cosine``. parameters: glob patterns of the matched parameters (default all). layer_weights: pattern →
    weight, 0 drops a layer. match_released: compare only the entries the client released. dropout_samples:
    the dummy gradient averaged over that many draws of stochastic layers. labels: ``auto`` (known if the
    threat model grants them, else inferred), ``known``, ``infer``. Search — optimizer: ``adam`` on z
    (GGL's gradient-based choice) or ``cma`` (CMA-ES, GGL's default, needs the ``cma`` extra). iterations:
    Adam steps, or CMA-ES generations of ``population`` candidates. lr: Adam's step on z (0.1). population:
    CMA-ES candidates per generation (None: cma's 4 + 3·ln(d)). cma_sigma: CMA-ES's initial step size. kl:
    weight of the latent's KL prior (GGL 0.1). restarts: independent starts, the lowest gradient distance
    kept. GIAS — finetune_steps: Adam steps on a per-victim copy of the generator's weights after the
    latent search (0: plain GGL). finetune_lr: their step size. vectorize: advance the victims of one
    FedSGD round together. The generator_* fields: the prior."""

    distance: Literal["l2", "l1", "cosine"] = "l2"
    parameters: list[str] | None = None
    layer_weights: dict[str, pydantic.NonNegativeFloat] = pydantic.Field(default_factory=dict)
    match_released: bool = False
    dropout_samples: int = pydantic.Field(default=1, ge=1)
    labels: Literal["auto", "known", "infer"] = "auto"
    optimizer: Literal["adam", "cma"] = "adam"
    iterations: int = pydantic.Field(default=1000, ge=1)
    lr: float = pydantic.Field(default=0.1, gt=0)
    kl: float = pydantic.Field(default=0.1, ge=0)
    restarts: int = pydantic.Field(default=1, ge=1)
    population: int | None = pydantic.Field(default=None, ge=2)
    cma_sigma: float = pydantic.Field(default=0.5, gt=0)
    finetune_steps: int = pydantic.Field(default=0, ge=0)
    finetune_lr: float = pydantic.Field(default=1e-3, gt=0)
    vectorize: bool = True


class GenerativeGradientLeakage(Attack):
    """GGL: see the module docstring; parameters :class:`GGLParams`. Fits on the public split (its
    generator, a cached artifact shared by every GGL variant with the same prior settings)."""

    params: GGLParams
    fit_scope = "public"

    def fit(self, data: FitData) -> Artifact:
        prior = GeneratorPriorParams(**self.params.model_dump(include=PRIOR_FIELDS))
        G = fitted_generator(prior, data.info, data.data, data.seed, data.cache, data.device, data.progress)
        return Artifact({k: v.detach().cpu() for k, v in G.state_dict().items()})

    def adaptation(self, view: ServerView) -> dict[str, Any]:
        """Parameter changes for the defenses in ``view``; plain GGL changes nothing."""
        return {}

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction:
        return self.reconstruct_many([view], seeds=[seed])[0]

    def reconstruct_many(
        self, views: Sequence[ServerView], *, seeds: Sequence[int], progress: bool = False
    ) -> list[Reconstruction]:
        if len(views) != len(seeds):
            raise ValueError(f"{len(views)} views but {len(seeds)} seeds")
        if not views:
            return []
        start = time.perf_counter()
        p = self.params.model_copy(update=self.adaptation(views[0]))
        first = views[0]
        device = next(first.model.parameters()).device
        generator = self._generator(first, device)
        names = matched_names(first.model, first, p.parameters, p.layer_weights)
        matching = Matching(generator, first.model, first.data_info, names,
                            [layer_weight(n, p.layer_weights) for n in names], p.distance,
                            p.match_released, p.dropout_samples, p.kl)  # fmt: skip
        labels = [resolve_labels(v, p.labels, device) for v in views]
        targets = [[v.update.delta[n].to(device) for n in names] for v in views]
        gens = [torch.Generator().manual_seed(s) for s in seeds]
        mapped = MappedLoss(matching) if p.vectorize and one_fedsgd_round(views) else None
        best_z: list[torch.Tensor | None] = [None] * len(views)
        best = [float("inf")] * len(views)
        priors: list[torch.Tensor] = []
        for _ in range(p.restarts):
            z0 = [
                torch.randn(v.batch_size, p.latent_dim, generator=g).to(device)
                for v, g in zip(views, gens, strict=True)
            ]
            if not priors:  # the prior's own draw for the labels: what the update must improve on
                with torch.no_grad():
                    priors = [generator(z, y).clamp(0, 1).cpu() for z, (y, _) in zip(z0, labels, strict=True)]
            found = self._search(p, matching, mapped, views, z0, labels, targets, seeds, progress)
            for i, (z, distance) in enumerate(found):
                if distance < best[i]:
                    best_z[i], best[i] = z, distance
        results = []
        for i, view in enumerate(views):
            z, y = best_z[i], labels[i][0]
            if z is None:
                raise FloatingPointError(f"victim {i}: every one of {p.restarts} restarts diverged (NaN/Inf)")
            G, distance = generator, best[i]
            if p.finetune_steps:
                G, distance = tune_generator(
                    matching, z, y, view, targets[i], p.finetune_steps, p.finetune_lr
                )
            with torch.no_grad():
                images = G(z, y).clamp(0, 1)
            stats = {"grad_distance": distance, "labels_known": float(labels[i][1] == "known"),
                     "vectorized": float(mapped is not None), "finetuned": float(p.finetune_steps > 0),
                     "seconds": (time.perf_counter() - start) / len(views)}  # fmt: skip
            results.append(Reconstruction(images=images.cpu(), labels=y.cpu(), stats=stats,
                                          normalized=view.data_info.normalize(images).cpu(),
                                          prior=priors[i]))  # fmt: skip
        return results

    def _search(
        self, p: GGLParams, matching: Matching, mapped: MappedLoss | None, views: Sequence[ServerView],
        z0: list[torch.Tensor], labels: list[tuple[torch.Tensor, str]], targets: list[list[torch.Tensor]],
        seeds: Sequence[int], progress: bool,
    ) -> list[tuple[torch.Tensor, float]]:  # fmt: skip
        """One restart: (best latent, its gradient distance) per victim."""
        ys = [y for y, _ in labels]
        if p.optimizer == "adam" and mapped is not None:
            stacked = [torch.stack([t[k] for t in targets]) for k in range(len(targets[0]))]
            z, distance = adam_mapped(mapped, torch.stack(z0), torch.stack(ys), stacked, p.iterations, p.lr,
                                      progress)  # fmt: skip
            return [(z[i], float(distance[i])) for i in range(len(views))]
        found = []
        for i, view in enumerate(views):
            if p.optimizer == "adam":
                found.append(adam_one(matching, z0[i], ys[i], view, targets[i], p.iterations, p.lr))
                continue

            def score(population: torch.Tensor, i: int = i, view: ServerView = view) -> torch.Tensor:
                if mapped is not None:
                    return mapped.values(population, ys[i], targets[i])
                with torch.enable_grad():
                    return torch.stack(
                        [matching.loss(z, ys[i], view, targets[i])[0].detach() for z in population]
                    )

            z, _ = cma_one(score, z0[i], generations=p.iterations, sigma=p.cma_sigma, population=p.population,
                           seed=seeds[i])  # fmt: skip
            with torch.enable_grad():
                _, distance = matching.loss(z, ys[i], view, targets[i])
            found.append((z, float(distance.detach())))
        return found

    def _generator(self, view: ServerView, device: torch.device) -> torch.nn.Module:
        prior = GeneratorPriorParams(**self.params.model_dump(include=PRIOR_FIELDS))
        if self.artifact is None:
            if prior.generator_weights is None:
                raise RuntimeError(
                    f"{self.name} needs its generator: fit it on the public split first "
                    "(attack.with_artifact(attack.fit(...))) or give generator_weights"
                )
            return fitted_generator(prior, view.data_info, None, 0, None, device).requires_grad_(False)
        G = build_generator(prior, view.data_info)
        G.load_state_dict(dict(self.artifact.tensors))
        return G.to(device).eval().requires_grad_(False)


class AdaptiveGGL(GenerativeGradientLeakage):
    """GGL whose trial gradient passes through the defenses' public release transform (GGL Sec. 3.3);
    see the module docstring for the adaptation per defense."""

    def adaptation(self, view: ServerView) -> dict[str, Any]:
        update: dict[str, Any] = {}
        weights = dict(self.params.layer_weights)
        if find_defense(view.defenses, "soteria") is not None:
            weights = soteria_adaptation(view, weights)["layer_weights"]
            update["layer_weights"] = weights
        update.update(noise_adaptation(view, weights))
        if find_defense(view.defenses, "pruning", "quantization") is not None:
            update["match_released"] = True
        if find_defense(view.defenses, "precode", "dropout") is not None:
            update["dropout_samples"] = max(self.params.dropout_samples, 8)
        return update


ATTACKS.register(
    "ggl",
    summary="GGL: Adam (lr 0.1) on the latent of a conditional generator trained on the public split, "
    "conditioned on the labels, matching the update (L2 averaged over layers) + 0.1·KL(z); 1000 steps; "
    "ggl-cma: CMA-ES; gias: + 100 steps tuning the generator's weights per victim",
    reference=f"{REFERENCE}; Jeon et al., Gradient Inversion with Generative Image Prior, NeurIPS 2021 "
    "(gias)",
    params=GGLParams,
    threat=PRIOR_OBSERVER,
    aliases={"ggl-cma": {"optimizer": "cma"}, "gias": {"finetune_steps": 100}},
)(GenerativeGradientLeakage)

ATTACKS.register(
    "ggl-adaptive",
    summary="adaptive vs noise, DP-SGD, clipping, pruning, quantization, Soteria, dropout, PRECODE: GGL "
    "whose trial gradient passes through the defense's public release transform",
    reference=f"{REFERENCE}, Sec. 3.3",
    params=GGLParams,
    threat=threat(
        Adversary.OBSERVING_SERVER, (Knowledge.PROTOCOL, Knowledge.PUBLIC_SPLIT, Knowledge.DEFENSES)
    ),
    targets=(
        "gaussian-noise",
        "laplacian-noise",
        "dp-sgd",
        "clipping",
        "pruning",
        "quantization",
        "soteria",
        "dropout",
        "precode",
    ),
)(AdaptiveGGL)
