"""Gradient inversion by gradient matching: one engine, configured by parameters, for DLG, iDLG and
Inverting Gradients (and, through its parts, the variants the later presets need).

The attack optimizes dummy inputs x' (in the model's normalized input space) so that the update they
would produce matches the observed one:

* FedSGD: minimize D(∇θ L(f(x'), y'), g) + α_TV·TV(x'), D the L2 or cosine distance;
* FedAvg: unroll the client's known local SGD (lr, momentum, epochs, minibatch size) and match the
  parameter update Δθ. Minibatches are unrolled in order: when the client shuffled (a secret order), the
  dummy images are free to take any order, but known labels can no longer be paired with the right step.
"""

from __future__ import annotations

import math
import time
from typing import Literal

import pydantic
import torch
from torch import nn
from torch.func import functional_call

from leakshield.attacks.base import Attack, Reconstruction
from leakshield.attacks.inversion.objectives import DISTANCES, ig_milestones, total_variation
from leakshield.attacks.labels import classifier_weight_name, infer_labels
from leakshield.fl.loss import cross_entropy
from leakshield.fl.types import ServerView
from leakshield.registry import Params


class GradientInversionParams(Params):
    """Parameters of :class:`GradientInversion`.

    distance: ``l2`` (DLG) or ``cosine`` (IG). optimizer: ``lbfgs`` or ``adam``. lr: step size.
    iterations: optimizer steps (L-BFGS: outer steps of up to ``lbfgs_max_iter`` evaluations).
    tv: weight of the total-variation prior. signed: use the sign of the image gradient (IG).
    boxed: clamp to the valid pixel range after every step. lr_schedule: ``milestones`` decays the lr by
    10 at 3/8, 5/8 and 7/8 of the budget (IG's schedule scaled to it). init: ``randn`` or ``uniform``
    (in normalized space). labels: ``known`` (the threat model must grant them), ``infer`` (iDLG rule),
    ``auto`` (known if granted, else inferred). restarts: independent runs, the one with the lowest final
    gradient distance kept; diverging (NaN/Inf) runs are dropped. tolerance: stop when the gradient
    distance falls below it.
    """

    distance: Literal["l2", "cosine"] = "l2"
    optimizer: Literal["lbfgs", "adam"] = "lbfgs"
    lr: float = pydantic.Field(default=1.0, gt=0)
    iterations: int = pydantic.Field(default=300, ge=1)
    tv: float = pydantic.Field(default=0.0, ge=0)
    signed: bool = False
    boxed: bool = False
    lr_schedule: Literal["none", "milestones"] = "none"
    init: Literal["randn", "uniform"] = "randn"
    labels: Literal["auto", "known", "infer"] = "auto"
    restarts: int = pydantic.Field(default=1, ge=1)
    tolerance: float = pydantic.Field(default=1e-6, ge=0)
    lbfgs_max_iter: int = pydantic.Field(default=20, ge=1)
    lbfgs_history: int = pydantic.Field(default=100, ge=1)
    lbfgs_line_search: Literal["strong_wolfe", "none"] = "strong_wolfe"


class GradientInversion(Attack):
    """Optimization-based reconstruction from a FedSGD gradient or an unrolled FedAvg update.

    References: Zhu et al., Deep Leakage from Gradients (NeurIPS 2019); Zhao et al., iDLG (2020);
    Geiping et al., Inverting Gradients (NeurIPS 2020). Parameters: :class:`GradientInversionParams`.
    """

    params: GradientInversionParams

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction:
        p = self.params
        start = time.perf_counter()
        model = view.model
        device = next(model.parameters()).device
        info = view.data_info
        n = view.batch_size
        labels, labels_known = self._labels(view, device)
        names = [name for name, _ in model.named_parameters() if name in view.update.delta]
        target = [view.update.delta[name].to(device) for name in names]
        distance = DISTANCES[p.distance]
        lo, hi = info.normalized_bounds(torch.zeros(1, *info.shape, device=device))
        gen = torch.Generator(device="cpu").manual_seed(seed)

        def matching_loss(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            dummy = self._dummy_update(model, names, x, labels, view)
            grad_distance = distance(dummy, target)
            loss = grad_distance + p.tv * total_variation(x) if p.tv else grad_distance
            return loss, grad_distance

        best_x, best_score, diverged = None, math.inf, 0
        for _ in range(p.restarts):
            x0 = self._init(n, info.shape, gen).to(device)
            if p.boxed:
                x0 = torch.max(torch.min(x0, hi), lo)
            x, score = self._optimize(x0, matching_loss, lo, hi)
            if not math.isfinite(score):
                diverged += 1
                continue
            if score < best_score:
                best_x, best_score = x, score
        if best_x is None:
            raise FloatingPointError(f"every one of {p.restarts} restarts diverged (NaN/Inf)")
        images = info.denormalize(best_x.detach()).clamp(0, 1).cpu()
        stats = {
            "grad_distance": best_score,
            "restarts_diverged": float(diverged),
            "labels_known": float(labels_known),
            "seconds": time.perf_counter() - start,
        }
        return Reconstruction(images=images, labels=labels.cpu(), stats=stats)

    # -- parts -------------------------------------------------------------------------------------
    def _labels(self, view: ServerView, device: torch.device) -> tuple[torch.Tensor, bool]:
        mode = self.params.labels
        if mode == "known" and view.labels is None:
            raise ValueError("labels='known' but the threat model does not grant the labels")
        if mode in ("known", "auto") and view.labels is not None:
            return view.labels.to(device), True
        weight = view.update.delta[classifier_weight_name(view)]
        if view.update.protocol.algorithm == "fedavg":
            weight = -weight  # Δθ ≈ −lr·Σ g: the sign flips, the ranking does not
        return infer_labels(weight, view.batch_size).to(device), False

    def _init(self, n: int, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
        if self.params.init == "uniform":
            return torch.rand(n, *shape, generator=gen) * 2 - 1
        return torch.randn(n, *shape, generator=gen)

    @staticmethod
    def _dummy_update(
        model: nn.Module, names: list[str], x: torch.Tensor, labels: torch.Tensor, view: ServerView
    ) -> list[torch.Tensor]:
        """The update the dummy batch would produce, differentiable w.r.t. ``x``."""
        facts = view.update.protocol
        params = dict(model.named_parameters())
        if facts.algorithm == "fedsgd":
            loss = cross_entropy(model(x), labels)
            return list(torch.autograd.grad(loss, [params[k] for k in names], create_graph=True))
        current = {k: v for k, v in params.items()}
        buffers = dict(model.named_buffers())
        velocity = {k: torch.zeros_like(v) for k, v in params.items()}
        batches = math.ceil(len(x) / facts.batch_size)
        for _ in range(facts.local_epochs):
            for b in range(batches):
                sl = slice(b * facts.batch_size, (b + 1) * facts.batch_size)
                out = functional_call(model, {**current, **buffers}, (x[sl],))
                grads = torch.autograd.grad(
                    cross_entropy(out, labels[sl]), list(current.values()), create_graph=True
                )
                for (k, v), g in zip(list(current.items()), grads, strict=True):
                    velocity[k] = facts.momentum * velocity[k] + g
                    current[k] = v - facts.local_lr * velocity[k]
        return [current[k] - params[k] for k in names]

    def _optimize(self, x0, matching_loss, lo, hi):
        p = self.params
        x = x0.clone().requires_grad_(True)
        best_x, best = x.detach().clone(), math.inf

        def remember(value: torch.Tensor) -> None:
            nonlocal best_x, best
            v = float(value.detach())
            if math.isfinite(v) and v < best:
                best, best_x = v, x.detach().clone()

        if p.optimizer == "lbfgs":
            line_search = None if p.lbfgs_line_search == "none" else p.lbfgs_line_search
            opt = torch.optim.LBFGS(
                [x],
                lr=p.lr,
                max_iter=p.lbfgs_max_iter,
                history_size=p.lbfgs_history,
                line_search_fn=line_search,
            )

            def closure() -> torch.Tensor:
                loss, grad_distance = matching_loss(x)
                (x.grad,) = torch.autograd.grad(loss, x)
                remember(grad_distance)
                return loss

            for _ in range(p.iterations):
                loss = opt.step(closure)
                if not torch.isfinite(loss) or not torch.isfinite(x).all() or best < p.tolerance:
                    break
                if p.boxed:
                    with torch.no_grad():
                        x.copy_(torch.max(torch.min(x, hi), lo))
            return best_x, best

        opt = torch.optim.Adam([x], lr=p.lr)
        sched = (
            torch.optim.lr_scheduler.MultiStepLR(opt, ig_milestones(p.iterations), gamma=0.1)
            if p.lr_schedule == "milestones"
            else None
        )
        for _ in range(p.iterations):
            loss, grad_distance = matching_loss(x)
            if not torch.isfinite(loss):
                break
            remember(grad_distance)
            (grad,) = torch.autograd.grad(loss, x)
            x.grad = grad.sign() if p.signed else grad
            opt.step()
            if sched is not None:
                sched.step()
            if p.boxed:
                with torch.no_grad():
                    x.copy_(torch.max(torch.min(x, hi), lo))
            if best < p.tolerance:
                break
        final = float(matching_loss(x)[1].detach()) if torch.isfinite(x).all() else math.nan
        if math.isfinite(final) and final <= best:
            return x.detach().clone(), final
        return best_x, best
