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
import fnmatch
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import pydantic
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call
from tqdm.auto import tqdm

from leakshield.attacks.base import Attack, Reconstruction
from leakshield.attacks.inversion.objectives import (
    DISTANCES,
    BatchNormStatistics,
    image_norm,
    task_loss,
    total_variation,
)
from leakshield.attacks.inversion.vectorized import VectorizedObjective
from leakshield.attacks.labels import classifier_weight_name, infer_labels
from leakshield.errors import ConfigError
from leakshield.fl.loss import training_loss
from leakshield.fl.types import ServerView
from leakshield.models.base import is_stochastic
from leakshield.registry import Params
from leakshield.schedules import ig_step_schedule


class GradientInversionParams(Params):
    """Parameters of :class:`GradientInversion`.

    Matching — distance: ``l2`` (DLG), ``l1`` or ``cosine`` (IG, global over the matched layers).
    parameters: glob patterns of the parameter names to match (default: all). layer_weights: glob
    pattern → weight of the matching layers (first matching pattern wins, default 1; 0 drops a layer).
    Optimization — optimizer: ``lbfgs``, ``adam`` or ``sgd`` (with ``momentum``). lr: step size.
    iterations: steps (L-BFGS: outer steps of up to ``lbfgs_max_iter`` evaluations, strong-Wolfe line
    search unless ``lbfgs_line_search: none`` as in the DLG reference). lr_schedule: ``milestones`` decays
    the lr by 10 at 3/8, 5/8 and 7/8 of the budget (IG's schedule scaled to it), ``cosine`` decays to 0
    after ``warmup`` linear warm-up steps. signed: step on the sign of the image gradient (IG).
    boxed: clamp to the valid pixel range after every step.
    Priors — tv (total variation), image_norm (mean squared normalized pixel), bn_stats (BatchNorm
    statistics matching), task_loss (cross-entropy of the dummy batch, CPL): weights, 0 = off.
    Start — init: ``randn``, ``uniform`` (in normalized space), ``patterned`` (CPL: a random
    half-size patch tiled 2×2), ``constant`` (mid-grey) or ``image`` (``init_image``: a .png or .npy
    file, or images handed to the attack in code). labels: ``known`` (the threat model must grant them),
    ``infer`` (iDLG rule; batch rule for larger batches), ``bias`` (FedSGD, batch 1: no label at all —
    the loss gradient w.r.t. the logits is read off the classifier's bias gradient, so soft and mixed
    labels (MixUp, InstaHide) are matched exactly), ``joint`` (optimized as soft labels with the
    images, DLG), ``auto`` (known if granted, else inferred). restarts: independent runs, the one with
    the lowest final gradient distance kept; diverging (NaN/Inf) runs are dropped. tolerance: stop when
    the gradient distance falls below it.
    Adaptive parts — match_released: compare only the entries the client released (non-zero in the
    observed update; against pruning). dropout_samples: average the dummy gradient over that many draws
    of the model's stochastic layers (expectation over dropout masks or PRECODE's bottleneck samples).
    Speed — vectorize: attack independent victims of one round together in one vmapped step (Adam/SGD,
    FedSGD, eval-mode model, no BN prior, no joint labels; else one by one). compile: also compile that
    step with torch.compile (checked against eager on the first step; falls back when it fails).
    """

    distance: Literal["l2", "l1", "cosine"] = "l2"
    parameters: list[str] | None = None
    layer_weights: dict[str, pydantic.NonNegativeFloat] = pydantic.Field(default_factory=dict)
    optimizer: Literal["lbfgs", "adam", "sgd"] = "lbfgs"
    lr: float = pydantic.Field(default=1.0, gt=0)
    momentum: float = pydantic.Field(default=0.0, ge=0, lt=1)
    iterations: int = pydantic.Field(default=300, ge=1)
    lr_schedule: Literal["none", "milestones", "cosine"] = "none"
    warmup: int = pydantic.Field(default=0, ge=0)
    signed: bool = False
    boxed: bool = False
    tv: float = pydantic.Field(default=0.0, ge=0)
    image_norm: float = pydantic.Field(default=0.0, ge=0)
    bn_stats: float = pydantic.Field(default=0.0, ge=0)
    task_loss: float = pydantic.Field(default=0.0, ge=0)
    init: Literal["randn", "uniform", "patterned", "constant", "image"] = "randn"
    init_image: str | None = None
    labels: Literal["auto", "known", "infer", "bias", "joint"] = "auto"
    restarts: int = pydantic.Field(default=1, ge=1)
    tolerance: float = pydantic.Field(default=1e-6, ge=0)
    lbfgs_max_iter: int = pydantic.Field(default=20, ge=1)
    lbfgs_history: int = pydantic.Field(default=100, ge=1)
    lbfgs_line_search: Literal["strong_wolfe", "none"] = "strong_wolfe"
    match_released: bool = False
    dropout_samples: int = pydantic.Field(default=1, ge=1)
    vectorize: bool = True
    compile: bool = False

    @pydantic.model_validator(mode="after")
    def _image_init_needs_a_file(self) -> GradientInversionParams:
        if self.init_image is not None and not Path(self.init_image).expanduser().is_file():
            raise ValueError(f"init_image: no file {self.init_image}")
        return self


Objective = Callable[[torch.Tensor, torch.Tensor | None], tuple[torch.Tensor, torch.Tensor]]


class GradientInversion(Attack):
    """Optimization-based reconstruction from a FedSGD gradient or an unrolled FedAvg update.

    References: Zhu et al., Deep Leakage from Gradients (NeurIPS 2019); Zhao et al., iDLG (2020);
    Geiping et al., Inverting Gradients (NeurIPS 2020); Wei et al., CPL (ESORICS 2020); Yin et al.,
    See through Gradients (CVPR 2021); Gao et al., ATS (CVPR 2021). Parameters:
    :class:`GradientInversionParams`. ``init_images`` (N×C×H×W in [0, 1]) overrides the start when
    ``init`` is ``image``.
    """

    params: GradientInversionParams

    def __init__(self, params: Params, init_images: torch.Tensor | None = None) -> None:
        super().__init__(params)
        self.init_images = init_images

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction:
        p = self.params
        start = time.perf_counter()
        model = copy.deepcopy(view.model) if p.bn_stats else view.model
        bn_prior = BatchNormStatistics(model) if p.bn_stats else None
        device = next(model.parameters()).device
        info = view.data_info
        n = view.batch_size
        labels, label_source = self._labels(view, device)
        names = self._matched_names(model, view)
        weights = [self._layer_weight(name) for name in names]
        target = [view.update.delta[name].to(device) for name in names]
        distance = DISTANCES[p.distance]
        lo, hi = info.normalized_bounds(torch.zeros(1, *info.shape, device=device))
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
            return loss, grad_distance

        best = (None, None, math.inf)
        diverged = 0
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
                    x, logits, score = self._optimize(x0, logits0, objective, lo, hi)
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
        return Reconstruction(
            images=images, labels=final_labels.detach().cpu(), stats=stats, normalized=best_x.detach().cpu()
        )

    # -- many victims at once -----------------------------------------------------------------------
    def vectorizable(self, views: Sequence[ServerView]) -> bool:
        """Whether :meth:`reconstruct_many` can advance these victims in one vectorized step."""
        p = self.params
        if not p.vectorize or len(views) < 2 or p.optimizer == "lbfgs" or p.labels == "joint" or p.bn_stats:
            return False
        first = views[0]
        if is_stochastic(first.model):
            return False
        if any(v.update.protocol.algorithm != "fedsgd" or v.model.training for v in views):
            return False
        if any(v.batch_size != first.batch_size for v in views):
            return False
        reference = first.model.state_dict()
        return all(
            all(torch.equal(t, reference[k]) for k, t in v.model.state_dict().items()) for v in views[1:]
        )

    def reconstruct_many(
        self, views: Sequence[ServerView], *, seeds: Sequence[int], progress: bool = False
    ) -> list[Reconstruction]:
        """Attack independent victims; vectorized over victims when :meth:`vectorizable`, with the same
        per-victim seeds, starts and (up to float rounding) trajectories as one-by-one attacks."""
        if len(views) != len(seeds):
            raise ValueError(f"{len(views)} views but {len(seeds)} seeds")
        if not self.vectorizable(views):
            return super().reconstruct_many(views, seeds=seeds, progress=progress)
        p = self.params
        start = time.perf_counter()
        first = views[0]
        model, info, n = first.model, first.data_info, first.batch_size
        device = next(model.parameters()).device
        resolved = [self._labels(v, device) for v in views]
        labels = torch.stack([y for y, _ in resolved])
        names = self._matched_names(model, first)
        weights = [self._layer_weight(name) for name in names]
        targets = [torch.stack([v.update.delta[name].to(device) for v in views]) for name in names]
        objective = VectorizedObjective(
            model,
            names,
            distance=p.distance,
            weights=weights,
            tv=p.tv,
            norm=p.image_norm,
            task=p.task_loss,
            match_released=p.match_released,
            logit_gradient=p.labels == "bias",
        )
        lo, hi = info.normalized_bounds(torch.zeros(1, *info.shape, device=device))
        gens = [torch.Generator(device="cpu").manual_seed(seed) for seed in seeds]
        victims = len(views)
        best_x = torch.zeros(victims, n, *info.shape, device=device)
        best_score = torch.full((victims,), math.inf, device=device)
        diverged = torch.zeros(victims)
        compiled = False
        for restart in range(p.restarts):
            x0 = torch.stack([self._init(n, info, g) for g in gens]).to(device)
            if p.boxed:
                x0 = torch.max(torch.min(x0, hi), lo)
            if p.compile and restart == 0:
                compiled = objective.compile(x0, labels, targets)
            x, score = self._optimize_many(x0, objective, labels, targets, lo, hi, progress)
            finite = torch.isfinite(score)
            diverged += (~finite).float().cpu()
            better = finite & (score < best_score)
            best_x[better], best_score[better] = x[better], score[better]
        if not torch.isfinite(best_score).all():
            lost = (~torch.isfinite(best_score)).nonzero().flatten().tolist()
            raise FloatingPointError(f"victims {lost}: every one of {p.restarts} restarts diverged (NaN/Inf)")
        seconds = (time.perf_counter() - start) / victims
        results = []
        for i, (y, source) in enumerate(resolved):
            stats = {
                "grad_distance": float(best_score[i]),
                "restarts_diverged": float(diverged[i]),
                "labels_known": float(source == "known"),
                "seconds": seconds,
                "vectorized": 1.0,
                "compiled": float(compiled),
            }
            images = info.denormalize(best_x[i]).clamp(0, 1).cpu()
            if source == "bias":
                y = y.argmin(dim=-1)
            results.append(
                Reconstruction(
                    images=images, labels=y.cpu(), stats=stats, normalized=best_x[i].detach().cpu()
                )
            )
        return results

    def _optimize_many(self, x0, objective: VectorizedObjective, labels, targets, lo, hi, progress):
        """One restart for every victim at once; per victim, the iterate with the lowest objective."""
        p = self.params
        x = x0.clone().requires_grad_(True)
        if p.optimizer == "adam":
            opt: torch.optim.Optimizer = torch.optim.Adam([x], lr=p.lr)
        else:
            opt = torch.optim.SGD([x], lr=p.lr, momentum=p.momentum)
        sched = self._scheduler(opt)
        best_x = x.detach().clone()
        best_loss = torch.full((len(x),), math.inf, device=x.device)
        best_score = best_loss.clone()

        def track(loss: torch.Tensor, score: torch.Tensor) -> None:
            better = torch.isfinite(loss) & (loss < best_loss)
            best_x[better] = x.detach()[better]
            best_loss[better], best_score[better] = loss[better], score[better]

        for _ in tqdm(range(p.iterations), desc="vectorized attack", disable=not progress, leave=False):
            # a detached input: torch.func computes the image gradient itself, and an input that requires
            # grad would make autograd record a needless outer graph around the whole step
            grad_x, (loss, score) = objective.step(x.detach(), labels, *targets)
            track(loss, score)
            if not torch.isfinite(loss).any() or bool((best_score < p.tolerance).all()):
                break
            x.grad = grad_x.sign() if p.signed else grad_x
            opt.step()
            if sched is not None:
                sched.step()
            if p.boxed:
                with torch.no_grad():
                    x.copy_(torch.max(torch.min(x, hi), lo))
        track(*objective.step(x.detach(), labels, *targets)[1])
        return best_x, best_score

    # -- parts -------------------------------------------------------------------------------------
    def _labels(self, view: ServerView, device: torch.device) -> tuple[torch.Tensor | None, str]:
        mode = self.params.labels
        if mode == "joint":
            return None, "joint"
        if mode == "bias":
            facts = view.update.protocol
            if facts.algorithm != "fedsgd" or view.batch_size != 1:
                raise ConfigError("labels: 'bias' needs a FedSGD gradient of a single image")
            bias = classifier_weight_name(view).removesuffix("weight") + "bias"
            if bias not in view.update.delta:
                raise ConfigError("labels: 'bias' needs a classifier with a bias")
            return view.update.delta[bias].to(device).reshape(1, -1), "bias"
        if mode == "known" and view.labels is None:
            raise ValueError("labels='known' but the threat model does not grant the labels")
        if mode in ("known", "auto") and view.labels is not None:
            return view.labels.to(device), "known"
        weight = view.update.delta[classifier_weight_name(view)]
        if view.update.protocol.algorithm == "fedavg":
            weight = -weight  # Δθ ≈ −lr·Σ g: the sign flips, the ranking does not
        return infer_labels(weight, view.batch_size).to(device), "inferred"

    def _matched_names(self, model: nn.Module, view: ServerView) -> list[str]:
        names = [name for name, _ in model.named_parameters() if name in view.update.delta]
        patterns = self.params.parameters
        if patterns is not None:
            names = [n for n in names if any(fnmatch.fnmatchcase(n, pat) for pat in patterns)]
        names = [n for n in names if self._layer_weight(n) > 0]
        if not names:
            raise ConfigError("parameters/layer_weights: no parameter of the model is left to match")
        return names

    def _layer_weight(self, name: str) -> float:
        for pattern, weight in self.params.layer_weights.items():
            if fnmatch.fnmatchcase(name, pattern):
                return float(weight)
        return 1.0

    def _init(self, n: int, info, gen: torch.Generator) -> torch.Tensor:
        shape = info.shape
        kind = self.params.init
        if kind == "uniform":
            return torch.rand(n, *shape, generator=gen) * 2 - 1
        if kind == "patterned":  # CPL: a random patch of half the size tiled 2×2
            c, h, w = shape
            patch = torch.rand(n, c, (h + 1) // 2, (w + 1) // 2, generator=gen)
            return info.normalize(patch.repeat(1, 1, 2, 2)[:, :, :h, :w])
        if kind == "constant":
            return info.normalize(torch.full((n, *shape), 0.5))
        if kind == "image":
            return info.normalize(self._start_images(n, shape))
        return torch.randn(n, *shape, generator=gen)

    def _start_images(self, n: int, shape: tuple[int, int, int]) -> torch.Tensor:
        images = self.init_images
        if images is None:
            if self.params.init_image is None:
                raise ConfigError("init: 'image' needs init_image (a .png or .npy file) or init_images")
            images = load_image_file(Path(self.params.init_image).expanduser(), shape)
        images = images.float()
        if images.ndim == 3:
            images = images.unsqueeze(0)
        images = F.interpolate(images, size=shape[1:], mode="bilinear", align_corners=False)
        if images.shape[1] != shape[0]:
            images = images.mean(dim=1, keepdim=True).expand(-1, shape[0], -1, -1)
        return images.clamp(0, 1).repeat(math.ceil(n / len(images)), 1, 1, 1)[:n]

    @staticmethod
    def _dummy_update(
        model: nn.Module,
        names: list[str],
        x: torch.Tensor,
        labels: torch.Tensor,
        view: ServerView,
        samples: int = 1,
        *,
        logit_gradient: bool = False,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The update the dummy batch would produce (differentiable w.r.t. ``x``) and its first task
        loss; with ``samples`` > 1 (FedSGD) the mean over that many draws of the stochastic layers.
        ``logit_gradient``: ``labels`` is the loss gradient w.r.t. the logits, ∂L/∂z (labels 'bias'), and
        the dummy gradient is the vector–Jacobian product ∂z/∂θᵀ·∂L/∂z."""
        facts = view.update.protocol
        params = dict(model.named_parameters())
        if facts.algorithm == "fedsgd":
            total: list[torch.Tensor] | None = None
            for _ in range(samples):
                loss = task_loss(model, model(x), labels, logit_gradient)
                grads = torch.autograd.grad(loss, [params[k] for k in names], create_graph=True)
                total = list(grads) if total is None else [t + g for t, g in zip(total, grads, strict=True)]
            assert total is not None
            return [t / samples for t in total], loss
        current = dict(params)
        buffers = dict(model.named_buffers())
        velocity = {k: torch.zeros_like(v) for k, v in params.items()}
        batches = math.ceil(len(x) / facts.batch_size)
        first_loss = None
        for _ in range(facts.local_epochs):
            for b in range(batches):
                sl = slice(b * facts.batch_size, (b + 1) * facts.batch_size)
                logits = functional_call(model, {**current, **buffers}, (x[sl],))
                loss = training_loss(model, logits, labels[sl])
                first_loss = loss if first_loss is None else first_loss
                grads = torch.autograd.grad(loss, list(current.values()), create_graph=True)
                for (k, v), g in zip(list(current.items()), grads, strict=True):
                    velocity[k] = facts.momentum * velocity[k] + g
                    current[k] = v - facts.local_lr * velocity[k]
        assert first_loss is not None
        return [current[k] - params[k] for k in names], first_loss

    def _scheduler(self, opt: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler | None:
        p = self.params
        if p.lr_schedule == "milestones":
            return ig_step_schedule(opt, p.iterations)
        if p.lr_schedule == "cosine":
            total, warm = p.iterations, min(p.warmup, p.iterations - 1)

            def factor(step: int) -> float:
                if step < warm:
                    return (step + 1) / warm
                return 0.5 * (1 + math.cos(math.pi * (step - warm) / max(total - warm, 1)))

            return torch.optim.lr_scheduler.LambdaLR(opt, factor)
        return None

    def _optimize(self, x0, logits0, objective: Objective, lo, hi):
        """Run one restart. Returns the iterate with the lowest objective seen (distance + priors, the
        quantity being minimized) as (image, label logits, its gradient distance); restarts are then
        compared on that gradient distance."""
        p = self.params
        x = x0.clone().requires_grad_(True)
        logits = logits0.clone().requires_grad_(True) if logits0 is not None else None
        variables = [x] if logits is None else [x, logits]
        best: list = [x.detach().clone(), None if logits is None else logits.detach().clone(), math.inf]
        best_loss = math.inf

        def remember(loss: torch.Tensor, grad_distance: torch.Tensor) -> None:
            nonlocal best_loss
            value = float(loss.detach())
            if math.isfinite(value) and value < best_loss:
                best_loss = value
                best[:] = [
                    x.detach().clone(),
                    None if logits is None else logits.detach().clone(),
                    float(grad_distance.detach()),
                ]

        def box() -> None:
            if p.boxed:
                with torch.no_grad():
                    x.copy_(torch.max(torch.min(x, hi), lo))

        def evaluate() -> torch.Tensor:
            loss, grad_distance = objective(x, logits)
            grads = torch.autograd.grad(loss, variables)
            x.grad = grads[0].sign() if p.signed and p.optimizer != "lbfgs" else grads[0]
            if logits is not None:
                logits.grad = grads[1]
            remember(loss, grad_distance)
            return loss

        if p.optimizer == "lbfgs":
            line_search = None if p.lbfgs_line_search == "none" else p.lbfgs_line_search
            opt: torch.optim.Optimizer = torch.optim.LBFGS(
                variables,
                lr=p.lr,
                max_iter=p.lbfgs_max_iter,
                history_size=p.lbfgs_history,
                line_search_fn=line_search,
            )
            for _ in range(p.iterations):
                loss = opt.step(evaluate)
                if not torch.isfinite(loss) or not torch.isfinite(x).all() or best[2] < p.tolerance:
                    break
                box()
            return tuple(best)

        if p.optimizer == "adam":
            opt = torch.optim.Adam(variables, lr=p.lr)
        else:
            opt = torch.optim.SGD(variables, lr=p.lr, momentum=p.momentum)
        sched = self._scheduler(opt)
        for _ in range(p.iterations):
            loss = evaluate()
            if not torch.isfinite(loss):
                break
            opt.step()
            if sched is not None:
                sched.step()
            box()
            if best[2] < p.tolerance:
                break
        if torch.isfinite(x).all():
            remember(*objective(x, logits))
        return tuple(best)


def load_image_file(path: Path, shape: tuple[int, int, int]) -> torch.Tensor:
    """Images in [0, 1] (N×C×H×W) from a .npy file (uint8 or float, N×H×W×C or N×C×H×W) or a picture."""
    if path.suffix == ".npy":
        array = np.load(path, allow_pickle=False)
        tensor = torch.from_numpy(np.array(array, dtype=np.float32))
        if array.dtype == np.uint8:
            tensor = tensor / 255.0
        if tensor.ndim == 3:
            tensor = tensor.unsqueeze(0)
        if tensor.shape[-1] in (1, 3) and tensor.shape[1] not in (1, 3):
            tensor = tensor.permute(0, 3, 1, 2)
        return tensor
    from PIL import Image

    with Image.open(path) as img:
        mode = "L" if shape[0] == 1 else "RGB"
        array = np.asarray(img.convert(mode), dtype=np.float32) / 255.0
    tensor = torch.from_numpy(array)
    return tensor.unsqueeze(0).unsqueeze(0) if tensor.ndim == 2 else tensor.permute(2, 0, 1).unsqueeze(0)
