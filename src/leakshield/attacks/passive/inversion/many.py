"""Many victims of one FedSGD round, attacked together: the path chosen by calibration
(:mod:`~leakshield.attacks.passive.inversion.calibration`), victims in memory-sized chunks, Adam/SGD through
:func:`~leakshield.attacks.passive.inversion.loops.optimize_many` and L-BFGS through
:mod:`~leakshield.attacks.passive.inversion.batched_lbfgs`. Per victim the same seed, start and (up to
float rounding) the same trajectory as the one-victim engine."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence

import torch

from leakshield.attacks.base import Reconstruction
from leakshield.attacks.passive.inversion.batched_lbfgs import lbfgs_many
from leakshield.attacks.passive.inversion.calibration import Candidates, MemoryBudget, PathChoice, choose_path
from leakshield.attacks.passive.inversion.loops import optimize_many
from leakshield.attacks.passive.inversion.problem import MatchingProblem
from leakshield.attacks.passive.inversion.vectorized import VectorizedObjective
from leakshield.fl.types import ServerView


class ManyVictims:
    """The stacked problem of V victims: labels, targets, starts, and the vectorized objective."""

    def __init__(self, attack: MatchingProblem, views: Sequence[ServerView], seeds: Sequence[int]) -> None:
        p = attack.params
        self.attack, self.views, self.seeds = attack, list(views), list(seeds)
        first = views[0]
        self.info, self.n = first.data_info, first.batch_size
        self.device = next(first.model.parameters()).device
        self.resolved = [attack.labels_for(v, self.device) for v in views]
        self.joint = p.labels == "joint"
        names = attack.matched(first.model, first)
        self.targets = [torch.stack([v.update.delta[k].to(self.device) for v in views]) for k in names]
        self.objective = VectorizedObjective(
            first.model,
            names,
            distance=p.distance,
            weights=[attack.weight_of(k) for k in names],
            tv=p.tv,
            norm=p.image_norm,
            task=p.task_loss,
            match_released=p.match_released,
            logit_gradient=p.labels == "bias",
            joint_labels=self.joint,
        )
        self.labels = None if self.joint else torch.stack([y for y, _ in self.resolved])
        self.lo, self.hi = attack.box(self.info, self.device)
        self.gens = [torch.Generator(device="cpu").manual_seed(seed) for seed in seeds]
        self.pad_to: int | None = None  # the compiled step's batch size, when L-BFGS runs it

    def starts(self, idx: list[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The next restart's start of victims ``idx`` (each from its own generator, as one by one)."""
        p = self.attack.params
        x0 = torch.stack([self.attack.start(self.n, self.info, self.gens[i]) for i in idx]).to(self.device)
        if p.boxed:
            x0 = torch.max(torch.min(x0, self.hi), self.lo)
        logits0 = None
        if self.joint:
            classes = self.info.num_classes
            logits0 = torch.stack([torch.randn(self.n, classes, generator=self.gens[i]) for i in idx])
            logits0 = logits0.to(self.device)
        return x0, logits0

    def step_inputs(self, idx, x, logits):
        y = logits if self.joint else self.labels[idx]
        return x, y, [t[idx] for t in self.targets]

    def candidates(self) -> Candidates:
        probe = torch.randn(
            len(self.views), self.n, *self.info.shape, generator=torch.Generator().manual_seed(0)
        )
        probe = probe.to(self.device)
        logits = torch.zeros(len(self.views), self.n, self.info.num_classes, device=self.device)

        def loop(steps: int) -> None:
            timing = {"optimizer": "adam", "iterations": steps, "restarts": 1, "tolerance": 0.0}
            self.attack.with_params(**timing).with_execution(path="loop").reconstruct(self.views[0], seed=0)

        def vectorized(chunk: int, steps: int) -> None:
            idx = list(range(chunk))
            for _ in range(steps):
                self.objective.step(*_flat(self.step_inputs(idx, probe[:chunk], logits[:chunk])))

        def compile_chunk(chunk: int) -> bool:
            idx = list(range(chunk))
            x, y, targets = self.step_inputs(idx, probe[:chunk], logits[:chunk])
            other = torch.randn(probe[:chunk].shape, generator=torch.Generator().manual_seed(1))
            return self.objective.compile(x, y, targets, self.attack.execution.cuda_graphs, other.to(x))

        return Candidates(loop, vectorized, compile_chunk)


def _flat(inputs):
    x, y, targets = inputs
    return (x, y, *targets)


def attack_many(
    attack: MatchingProblem, views: Sequence[ServerView], seeds: Sequence[int], progress: bool
) -> list[Reconstruction]:
    p = attack.params
    start = time.perf_counter()
    problem = ManyVictims(attack, views, seeds)
    per_restart = p.iterations
    if p.optimizer == "lbfgs":  # objective evaluations: up to lbfgs_max_iter per outer step, or the bound
        per_restart = min(p.iterations * p.lbfgs_max_iter, p.lbfgs_max_evaluations or math.inf)
    steps = int(per_restart * p.restarts)
    key = {
        "model": [(k, tuple(v.shape)) for k, v in views[0].model.state_dict().items()],
        "model_type": type(views[0].model).__name__,
        "params": p.model_dump(mode="json", exclude={"iterations", "restarts", "tolerance"}),
        "batch": problem.n,
        "shape": problem.info.shape,
        # a compiled step's speed (and memory) differs with and without CUDA graphs
        "cuda_graphs": attack.execution.cuda_graphs and problem.device.type == "cuda",
    }
    choice = choose_path(
        key,
        len(views),
        steps,
        problem.candidates(),
        problem.device,
        requested=attack.execution.path,
        compile_after=attack.execution.compile_after,
        folder=attack.execution.calibration_dir,
        memory=MemoryBudget(attack.execution.memory_limit_gib, _bookkeeping_bytes(problem)),
    )
    if choice.path == "compiled":  # L-BFGS's batches shrink as victims finish: pad them to one size
        problem.pad_to = choice.chunk
    if choice.path == "loop":
        looped = attack.one_by_one(views, seeds, progress)
        return [_with_stats(r, choice, vectorized=False) for r in looped]
    victims = len(views)
    best_x = torch.zeros(victims, problem.n, *problem.info.shape, device=problem.device)
    best_logits = torch.zeros(victims, problem.n, problem.info.num_classes, device=problem.device)
    best_score = torch.full((victims,), math.inf, device=problem.device)
    diverged = torch.zeros(victims)
    evaluations, budget_hits = [0] * victims, [0] * victims  # L-BFGS's, per victim over its restarts
    chunks = [list(range(i, min(i + choice.chunk, victims))) for i in range(0, victims, choice.chunk)]
    for _ in range(p.restarts):
        for idx in chunks:
            x0, logits0 = problem.starts(idx)
            x, logits, score, counts = _one_restart(problem, idx, x0, logits0, progress)
            for row, (spent, hit) in counts.items():
                evaluations[idx[row]] += spent
                budget_hits[idx[row]] += hit
            finite = torch.isfinite(score)
            rows = torch.tensor(idx, device=problem.device)
            diverged[idx] += (~finite).float().cpu()
            better = finite & (score < best_score[rows])
            best_x[rows[better]], best_score[rows[better]] = x[better], score[better]
            if logits is not None:
                best_logits[rows[better]] = logits[better]
    if not torch.isfinite(best_score).all():
        lost = (~torch.isfinite(best_score)).nonzero().flatten().tolist()
        raise FloatingPointError(f"victims {lost}: every one of {p.restarts} restarts diverged (NaN/Inf)")
    seconds = (time.perf_counter() - start) / victims
    results = []
    for i, (y, source) in enumerate(problem.resolved):
        if problem.joint:
            y = best_logits[i].argmax(dim=-1)
        elif source == "bias":
            y = y.argmin(dim=-1)
        stats = {
            "grad_distance": float(best_score[i]),
            "restarts_diverged": float(diverged[i]),
            "labels_known": float(source == "known"),
            "seconds": seconds,
        }
        if p.optimizer == "lbfgs":
            stats.update(evaluations=float(evaluations[i]), evaluation_budget_hit=float(budget_hits[i]))
        images = problem.info.denormalize(best_x[i]).clamp(0, 1).cpu()
        reconstruction = Reconstruction(
            images=images, labels=y.detach().cpu(), stats=stats, normalized=best_x[i].detach().cpu()
        )
        results.append(_with_stats(reconstruction, choice, vectorized=True, graphs=key["cuda_graphs"]))
    return results


def _one_restart(problem: ManyVictims, idx: list[int], x0, logits0, progress: bool):
    p = problem.attack.params
    _, labels, targets = problem.step_inputs(idx, x0, logits0)
    if p.optimizer != "lbfgs":
        x, score = optimize_many(p, x0, problem.objective, labels, targets, problem.lo, problem.hi, progress)
        return x, None, score, {}
    return _lbfgs(problem, idx, x0, logits0, progress)


def _lbfgs(problem: ManyVictims, idx: list[int], x0, logits0, progress: bool):
    """Every victim's one-victim L-BFGS, evaluations and directions batched (:mod:`.batched_lbfgs`)."""
    p = problem.attack.params
    rows = torch.tensor(idx, device=problem.device)
    shape, size = x0.shape[1:], x0[0].numel()
    start = x0.flatten(1) if logits0 is None else torch.cat([x0.flatten(1), logits0.flatten(1)], 1)
    best_loss = torch.full((len(idx),), math.inf, device=problem.device)
    best_score = best_loss.clone()
    best = start.clone()
    pad = problem.pad_to

    def evaluate(victims: list[int], points: torch.Tensor):
        which, count = rows[victims], len(victims)
        if pad and count < pad:  # a compiled step has one batch size: fill with copies of the first
            which = torch.cat([which, which[:1].expand(pad - count)])
            points = torch.cat([points, points[:1].expand(pad - count, -1)])
        x = points[:, :size].view(-1, *shape)
        labels = points[:, size:].view(len(points), problem.n, -1) if problem.joint else problem.labels[which]
        grads, (loss, score) = problem.objective.step(x, labels, *[t[which] for t in problem.targets])
        flat = torch.cat([g.flatten(1) for g in grads], 1) if problem.joint else grads.flatten(1)
        return loss[:count], score[:count], flat[:count]

    def remember(victims: list[int], points: torch.Tensor, loss: torch.Tensor, score: torch.Tensor) -> None:
        at = torch.tensor(victims, device=problem.device)
        better = torch.isfinite(loss) & (loss < best_loss[at])  # selected by where: a mask would sync a GPU
        best[at] = torch.where(better[:, None], points, best[at])
        best_loss[at] = torch.where(better, loss, best_loss[at])
        best_score[at] = torch.where(better, score, best_score[at])

    host = _bookkeeping_host(problem)
    lo, hi = (problem.lo, problem.hi) if host is None else (problem.lo.to(host), problem.hi.to(host))

    def box(point: torch.Tensor) -> torch.Tensor:
        if not p.boxed:
            return point
        x = torch.max(torch.min(point[:size].view(shape), hi), lo)
        return torch.cat([x.flatten(), point[size:]])

    def solved(v: int) -> bool:
        return bool(best_score[v] < p.tolerance)

    counts = lbfgs_many(p, start, evaluate, box, remember, solved, progress, host=host)
    x = best[:, :size].view(-1, *shape)
    logits = best[:, size:].view(len(idx), problem.n, -1) if problem.joint else None
    return x, logits, best_score, counts


def _bookkeeping_bytes(problem: ManyVictims) -> float:
    """Batched L-BFGS's per-victim state on the evaluations' device (the curvature pairs and their inner
    products), which the memory probe of one step does not see; 0 when it is kept on the host."""
    p = problem.attack.params
    host = _bookkeeping_host(problem)
    if p.optimizer != "lbfgs" or (host is not None and host != problem.device):
        return 0.0
    dim = problem.n * (math.prod(problem.info.shape) + (problem.info.num_classes if problem.joint else 0))
    return 4.0 * (2 * p.lbfgs_history * dim + 2 * p.lbfgs_history**2 + 8 * dim)


def _bookkeeping_host(problem: ManyVictims) -> torch.device | None:
    """Where batched L-BFGS keeps its per-victim bookkeeping (execution setting ``lbfgs_bookkeeping``):
    the CPU for ``host``, else beside the evaluations (None)."""
    return torch.device("cpu") if problem.attack.execution.lbfgs_bookkeeping == "host" else None


def _with_stats(
    reconstruction: Reconstruction, choice: PathChoice, *, vectorized: bool, graphs: bool = False
) -> Reconstruction:
    stats = {**reconstruction.stats, "vectorized": float(vectorized), **choice.stats()}
    stats["compiled"] = float(choice.path == "compiled")
    stats["cuda_graphs"] = float(graphs and choice.path == "compiled")
    return dataclasses.replace(reconstruction, stats=stats)
