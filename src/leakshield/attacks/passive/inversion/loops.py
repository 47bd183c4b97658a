"""The optimizer loops of gradient inversion: one restart of one victim (L-BFGS, Adam or SGD, signed
steps, box, learning-rate schedule, best iterate tracked on the full objective), and one restart of
many victims advanced together by a vectorized step."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
from tqdm.auto import tqdm

from leakshield.attacks.passive.inversion.params import GradientInversionParams
from leakshield.attacks.passive.inversion.vectorized import VectorizedObjective
from leakshield.schedules import ig_step_schedule

#: x, label logits (None unless labels are optimized) → (loss incl. priors, gradient distance)
Objective = Callable[[torch.Tensor, torch.Tensor | None], tuple[torch.Tensor, torch.Tensor]]


def lr_scheduler(
    opt: torch.optim.Optimizer, p: GradientInversionParams
) -> torch.optim.lr_scheduler.LRScheduler | None:
    """IG's milestones scaled to the budget, a cosine decay after a linear warm-up, or none."""
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


class Restart(NamedTuple):
    """One restart's best iterate (lowest objective seen: distance + priors) and its gradient distance,
    on which restarts are compared; L-BFGS also counts its objective evaluations and whether
    ``lbfgs_max_evaluations`` stopped it."""

    x: torch.Tensor
    logits: torch.Tensor | None
    score: float
    evaluations: int = 0
    budget_hit: bool = False


def optimize_one(p: GradientInversionParams, x0, logits0, objective: Objective, lo, hi) -> Restart:
    """Run one restart of one victim (see :class:`Restart`)."""
    x = x0.clone().requires_grad_(True)
    logits = logits0.clone().requires_grad_(True) if logits0 is not None else None
    variables = [x] if logits is None else [x, logits]
    best: list = [x.detach().clone(), None if logits is None else logits.detach().clone(), math.inf]
    best_loss = last_loss = math.inf

    def remember(loss: torch.Tensor, grad_distance: torch.Tensor) -> None:
        nonlocal best_loss, last_loss
        # both values in one transfer: on a GPU each read is a synchronization
        value, distance = torch.stack((loss.detach(), grad_distance.detach().to(loss.dtype))).tolist()
        last_loss = value
        if math.isfinite(value) and value < best_loss:
            best_loss = value
            best[:] = [x.detach().clone(), None if logits is None else logits.detach().clone(), distance]

    def box() -> None:
        if p.boxed:
            with torch.no_grad():
                x.copy_(torch.max(torch.min(x, hi), lo))

    evaluations = 0

    def evaluate() -> torch.Tensor:
        nonlocal evaluations
        evaluations += 1
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
        budget_hit = False
        for _ in range(p.iterations):
            loss = opt.step(evaluate)
            if not torch.isfinite(loss) or not torch.isfinite(x).all() or best[2] < p.tolerance:
                break
            box()
            if p.lbfgs_max_evaluations is not None and evaluations >= p.lbfgs_max_evaluations:
                budget_hit = True
                break
        return Restart(*best, evaluations, budget_hit)

    if p.optimizer == "adam":
        opt = torch.optim.Adam(variables, lr=p.lr)
    else:
        opt = torch.optim.SGD(variables, lr=p.lr, momentum=p.momentum)
    sched = lr_scheduler(opt, p)
    since_better, previous_best = 0, math.inf
    for _ in range(p.iterations):
        evaluate()
        if not math.isfinite(last_loss):
            break
        since_better = 0 if best_loss < previous_best else since_better + 1
        previous_best = best_loss
        if p.patience and since_better >= p.patience:
            break
        opt.step()
        if sched is not None:
            sched.step()
        box()
        if best[2] < p.tolerance:
            break
    if torch.isfinite(x).all():
        remember(*objective(x, logits))
    return Restart(*best)


def optimize_many(
    p: GradientInversionParams, x0, objective: VectorizedObjective, labels, targets, lo, hi, progress: bool
):
    """One restart for every victim at once; per victim, the iterate with the lowest objective."""
    x = x0.clone().requires_grad_(True)
    if p.optimizer == "adam":
        opt: torch.optim.Optimizer = torch.optim.Adam([x], lr=p.lr)
    else:
        opt = torch.optim.SGD([x], lr=p.lr, momentum=p.momentum)
    sched = lr_scheduler(opt, p)
    best_x = x.detach().clone()
    best_loss = torch.full((len(x),), math.inf, device=x.device)
    best_score = best_loss.clone()

    since_better = torch.zeros(len(x), dtype=torch.long, device=x.device)

    def track(loss: torch.Tensor, score: torch.Tensor) -> None:
        better = torch.isfinite(loss) & (loss < best_loss)
        best_x[better] = x.detach()[better]
        best_loss[better], best_score[better] = loss[better], score[better]
        since_better.add_(1).masked_fill_(better, 0)

    for _ in tqdm(range(p.iterations), desc="vectorized attack", disable=not progress, leave=False):
        # a detached input: torch.func computes the image gradient itself, and an input that requires
        # grad would make autograd record a needless outer graph around the whole step
        grad_x, (loss, score) = objective.step(x.detach(), labels, *targets)
        track(loss, score)
        if not torch.isfinite(loss).any() or bool((best_score < p.tolerance).all()):
            break
        # a victim stopped by ``patience`` stays where it is, as if its own run had ended
        stopped = since_better >= p.patience if p.patience else None
        if stopped is not None and bool(stopped.all()):
            break
        held = x.detach()[stopped].clone() if stopped is not None else None
        x.grad = grad_x.sign() if p.signed else grad_x
        opt.step()
        if held is not None:
            with torch.no_grad():
                x[stopped] = held
        if sched is not None:
            sched.step()
        if p.boxed:
            with torch.no_grad():
                x.copy_(torch.max(torch.min(x, hi), lo))
    track(*objective.step(x.detach(), labels, *targets)[1])
    return best_x, best_score
