"""Gradient inversion by gradient matching: one engine, composed from parts, for DLG, iDLG, Inverting
Gradients, CPL, GradInversion and ATS's optimizer × distance variants (see ``presets``).

The attack optimizes dummy inputs x' (in the model's normalized input space) so that the update they
would produce matches the observed one:

* FedSGD: minimize D(∇θ L(f(x'), y'), g) + priors(x'), D the L2, L1 or cosine distance over the matched
  parameters with optional per-layer weights;
* FedAvg: unroll the client's known local SGD (lr, momentum, epochs, minibatch size) and match the
  parameter update Δθ. Minibatches are unrolled in order: when the client shuffled (a secret order), the
  dummy images are free to take any order, but known labels can no longer be paired with the right step.

Priors: total variation, the image's L2 norm, BatchNorm statistics (GradInversion), and the task loss
of the dummy batch (CPL's label-consistency term). Labels are known, inferred from the last layer, or
optimized jointly as soft labels (DLG).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from leakshield.attacks.base import Attack, Reconstruction
from leakshield.attacks.passive.inversion.batchnorm import BatchNormStatistics, batchnorm_targets
from leakshield.attacks.passive.inversion.loops import Objective, Restart, lr_scheduler, optimize_one
from leakshield.attacks.passive.inversion.many import attack_many
from leakshield.attacks.passive.inversion.objectives import DISTANCES, Distance, image_norm, total_variation
from leakshield.attacks.passive.inversion.params import GradientInversionParams
from leakshield.attacks.passive.inversion.problem import layer_weight, matched_names, one_fedsgd_round
from leakshield.attacks.passive.inversion.replay import dummy_update
from leakshield.attacks.passive.inversion.shards import attack_in_shards
from leakshield.attacks.passive.inversion.starts import initial_images, load_image_file
from leakshield.attacks.passive.labels import resolve_labels
from leakshield.data.types import DatasetInfo
from leakshield.fl.types import ServerView
from leakshield.registry import Params
from leakshield.threats import Knowledge, Threat
from leakshield.workers import in_worker

__all__ = ["GradientInversion", "GradientInversionParams", "load_image_file"]


class GradientInversion(Attack):
    """Optimization-based reconstruction from a FedSGD gradient or an unrolled FedAvg update.

    References: Zhu et al., Deep Leakage from Gradients (NeurIPS 2019); Zhao et al., iDLG (2020);
    Geiping et al., Inverting Gradients (NeurIPS 2020); Wei et al., CPL (ESORICS 2020); Yin et al.,
    See through Gradients (CVPR 2021); Gao et al., ATS (CVPR 2021). Parameters:
    :class:`GradientInversionParams`. ``init_images`` (N×C×H×W in [0, 1]) overrides the start when
    ``init`` is ``image``.
    """

    params: GradientInversionParams

    @property
    def threat(self) -> Threat:
        """The preset's declared threat; a BatchNorm prior (``bn_stats`` > 0) uses the client's
        BatchNorm statistics (Carletti's model E) whatever the preset."""
        declared = super().threat
        if self.params.bn_stats and Knowledge.BATCHNORM not in declared.knowledge:
            return dataclasses.replace(declared, knowledge=declared.knowledge | {Knowledge.BATCHNORM})
        return declared

    def __init__(self, params: Params, init_images: torch.Tensor | None = None) -> None:
        super().__init__(params)
        self.init_images = init_images

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction:
        p = self.params
        start = time.perf_counter()
        model = copy.deepcopy(view.model) if p.bn_stats else view.model
        bn_prior = (
            BatchNormStatistics(model, batchnorm_targets(model, view, attack=self.name))
            if p.bn_stats
            else None
        )
        device = next(model.parameters()).device
        info = view.data_info
        n = self._dummy_count(view)
        labels, label_source = self._labels(view, device)
        names = self._matched_names(model, view)
        weights = [self._layer_weight(name) for name in names]
        target = [view.update.delta[name].to(device) for name in names]
        distance = self._distance(view)
        lo, hi = self._bounds(info, device)
        gen = torch.Generator(device="cpu").manual_seed(seed)

        masks = [t != 0 for t in target] if p.match_released else None

        def objective(
            x: torch.Tensor, label_logits: torch.Tensor | None
        ) -> tuple[torch.Tensor, torch.Tensor]:
            y = labels if label_logits is None else F.softmax(label_logits, dim=-1)
            dummy, task = self._dummy_update(
                model, names, x, y, view, p.dropout_samples, logit_gradient=label_source == "bias"
            )
            if masks is not None:
                dummy = [d * m for d, m in zip(dummy, masks, strict=True)]
            grad_distance = distance(dummy, target, weights)
            loss = grad_distance
            if p.tv:
                loss = loss + p.tv * total_variation(x)
            if p.image_norm:
                loss = loss + p.image_norm * image_norm(x)
            if bn_prior is not None:
                loss = loss + p.bn_stats * bn_prior.pop()
            if p.task_loss:
                loss = loss + p.task_loss * task
            extra = self._prior(x, view)
            if extra is not None:
                loss = loss + extra
            return loss, grad_distance

        best = (None, None, math.inf)
        diverged = evaluations = budget_hits = 0
        # stochastic layers (dropout, PRECODE) draw from the global RNG: seed it for this attack only
        try:
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                torch.manual_seed(seed)
                for _ in range(p.restarts):
                    x0 = self._init(n, info, gen).to(device)
                    if p.boxed:
                        x0 = torch.max(torch.min(x0, hi), lo)
                    logits0 = None
                    if labels is None:  # joint optimization of soft labels (DLG)
                        logits0 = torch.randn(n, info.num_classes, generator=gen).to(device)
                    x, logits, score, spent, hit = self._optimize(x0, logits0, objective, (lo, hi), gen)
                    evaluations, budget_hits = evaluations + spent, budget_hits + hit
                    if not math.isfinite(score):
                        diverged += 1
                    elif score < best[2]:
                        best = (x, logits, score)
        finally:
            if bn_prior is not None:
                bn_prior.remove()
        best_x, best_logits, best_score = best
        if best_x is None:
            raise FloatingPointError(f"every one of {p.restarts} restarts diverged (NaN/Inf)")
        best_x = self._merged(best_x, view)
        final_labels = labels if best_logits is None else best_logits.argmax(dim=-1)
        if label_source == "bias":
            final_labels = labels.argmin(dim=-1)  # ∂L/∂z = p − t is most negative at the dominant class
        images = info.denormalize(best_x.detach()).clamp(0, 1).cpu()
        stats = {
            "grad_distance": best_score,
            "restarts_diverged": float(diverged),
            "labels_known": float(label_source == "known"),
            "seconds": time.perf_counter() - start,
        }
        if p.optimizer == "lbfgs":
            stats.update(evaluations=float(evaluations), evaluation_budget_hit=float(budget_hits))
        return Reconstruction(
            images=images, labels=final_labels.detach().cpu(), stats=stats, normalized=best_x.detach().cpu()
        )

    # -- many victims at once -----------------------------------------------------------------------
    def vectorizable(self, views: Sequence[ServerView]) -> bool:
        """Whether :meth:`reconstruct_many` may advance these victims together (one FedSGD round of one
        deterministic eval-mode model; no BatchNorm prior; joint labels only with L-BFGS; none of the
        engine's changeable parts overridden)."""
        p = self.params
        if self.execution.path == "loop" or len(views) < 2 or p.bn_stats or self._parts_changed():
            return False
        if p.labels == "joint" and p.optimizer != "lbfgs":
            return False
        return one_fedsgd_round(views)

    def reconstruct_many(
        self, views: Sequence[ServerView], *, seeds: Sequence[int], progress: bool = False
    ) -> list[Reconstruction]:
        """Attack independent victims by the fastest measured path (:mod:`.calibration`): together when
        :meth:`vectorizable`, with the same per-victim seeds, starts and (up to float rounding)
        trajectories as one-by-one attacks; the path taken is in each reconstruction's stats."""
        if len(views) != len(seeds):
            raise ValueError(f"{len(views)} views but {len(seeds)} seeds")
        on_cpu = all(next(v.model.parameters()).device.type == "cpu" for v in views)
        if self.execution.victim_shards > 1 and len(views) > 1 and on_cpu and not in_worker():
            return attack_in_shards(self, views, seeds)
        if not self.vectorizable(views):
            return super().reconstruct_many(views, seeds=seeds, progress=progress)
        return attack_many(self, views, seeds, progress)

    # -- parts -------------------------------------------------------------------------------------
    def _matched_names(self, model: nn.Module, view: ServerView) -> list[str]:
        return matched_names(model, view, self.params.parameters, self.params.layer_weights)

    def _layer_weight(self, name: str) -> float:
        return layer_weight(name, self.params.layer_weights)

    def _labels(self, view: ServerView, device: torch.device) -> tuple[torch.Tensor | None, str]:
        return resolve_labels(view, self.params.labels, device)

    def _bounds(self, info: DatasetInfo, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The box a boxed attack keeps its images in (normalized space): the valid pixel range; an
        adaptive attack may narrow it per pixel (ATS's known black borders)."""
        return info.normalized_bounds(torch.zeros(1, *info.shape, device=device))

    def _init(self, n: int, info: DatasetInfo, gen: torch.Generator) -> torch.Tensor:
        p = self.params
        return initial_images(p.init, n, info, gen, images=self.init_images, image_file=p.init_image)

    def _scheduler(self, opt: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler | None:
        return lr_scheduler(opt, self.params)

    #: the update a dummy batch would produce (``inversion.replay.dummy_update``)
    _dummy_update = staticmethod(dummy_update)

    # -- what attacks built on the engine change (FedLeak, the FedAvg attack of Dimitrov et al.) ------
    #: the parts below and the replay: the vectorized path knows none of their overrides
    CHANGEABLE_PARTS = (
        "_dummy_update",
        "_dummy_count",
        "_distance",
        "_prior",
        "_wrapped",
        "_optimize",
        "_merged",
    )

    def _parts_changed(self) -> bool:
        """Whether a subclass overrides one of :attr:`CHANGEABLE_PARTS` (then every victim runs alone)."""
        return any(
            getattr(type(self), part) is not getattr(GradientInversion, part)
            for part in self.CHANGEABLE_PARTS
        )

    def _dummy_count(self, view: ServerView) -> int:
        """How many dummy images are optimized: the batch's size."""
        return view.batch_size

    def _distance(self, view: ServerView) -> Distance:
        """The update distance of ``params.distance``."""
        return DISTANCES[self.params.distance]

    def _prior(self, x: torch.Tensor, view: ServerView) -> torch.Tensor | None:
        """A further prior on the dummy images, added to the objective (None: none)."""
        return None

    def _wrapped(self, objective: Objective, box: tuple[torch.Tensor, torch.Tensor] | None) -> Objective:
        """The objective the optimizer loop steps on (``box``: the pixel box of a boxed attack): the
        matching objective itself."""
        return objective

    def _optimize(
        self,
        x0: torch.Tensor,
        logits0: torch.Tensor | None,
        objective: Objective,
        bounds: tuple[torch.Tensor, torch.Tensor],
        gen: torch.Generator,
    ) -> Restart:
        """One restart from ``x0`` (``bounds``: the pixel box, applied when ``boxed``; ``gen``: the attack's
        seeded generator, for a search that draws more): the optimizer loop on :meth:`_wrapped`, fresh
        per restart."""
        stepped = self._wrapped(objective, bounds if self.params.boxed else None)
        return optimize_one(self.params, x0, logits0, stepped, *bounds)

    def _merged(self, x: torch.Tensor, view: ServerView) -> torch.Tensor:
        """The reconstruction of the batch from the optimized dummies: the dummies themselves."""
        return x

    # -- the public matching problem (:class:`~leakshield.attacks.passive.inversion.problem.MatchingProblem`)
    def labels_for(self, view: ServerView, device: torch.device) -> tuple[torch.Tensor | None, str]:
        return self._labels(view, device)

    def matched(self, model: nn.Module, view: ServerView) -> list[str]:
        return self._matched_names(model, view)

    def weight_of(self, name: str) -> float:
        return self._layer_weight(name)

    def box(self, info: DatasetInfo, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        return self._bounds(info, device)

    def start(self, n: int, info: DatasetInfo, gen: torch.Generator) -> torch.Tensor:
        return self._init(n, info, gen)

    def one_by_one(
        self, views: Sequence[ServerView], seeds: Sequence[int], progress: bool
    ) -> list[Reconstruction]:
        return Attack.reconstruct_many(self, views, seeds=seeds, progress=progress)

    def with_params(self, **update: object) -> GradientInversion:
        one = copy.copy(self)  # subclasses may take other constructor arguments
        one.params = self.params.model_copy(update=update)
        return one

    def with_execution(self, **update: object) -> GradientInversion:
        one = copy.copy(self)
        one.execution = self.execution.model_copy(update=update)
        return one
