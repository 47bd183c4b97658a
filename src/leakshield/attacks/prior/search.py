"""GGL's search in a generator's latent space (Li et al., CVPR 2022, Eq. 2–4) and GIAS's search in its
weights (Jeon et al., NeurIPS 2021, Sec. 3.2).

One victim's loss is  D(∇θ L(f(G(z|y)), y), g) / L + κ·KL(z)  with D the configured distance over the L
matched layers (GGL: the squared L2 distance averaged over layers; the cosine distance is not divided)
and KL(z) = ½ Σ_images (σ² + μ² − 1 − log σ²) over the empirical mean μ and variance σ² of each latent
vector's entries (GGL's prior keeping z on the Gaussian shell). The generator is conditioned on the
labels the attack knows or infers.

* Adam on z: victims of one FedSGD round on one deterministic model are advanced together — the loss of
  one victim is a pure function (``torch.func``) mapped over victims — else one by one through the
  client's replayed protocol (FedAvg unrolled, stochastic layers averaged). The best z seen is kept.
* CMA-ES (the ``cma`` package, an optional extra): one evolution strategy per victim, each generation's
  population scored in one mapped call; gradient-free, as GGL's default.
* GIAS: after the latent search, each victim gets its own copy of the generator whose weights are tuned
  by Adam on the same loss with z fixed.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from tqdm.auto import tqdm

from leakshield.attacks.passive.inversion.objectives import DISTANCES
from leakshield.attacks.passive.inversion.replay import dummy_update
from leakshield.attacks.passive.inversion.vectorized import VectorizedObjective
from leakshield.data.types import DatasetInfo
from leakshield.errors import ConfigError
from leakshield.fl.types import ServerView


def kl_prior(z: torch.Tensor) -> torch.Tensor:
    """GGL's KL term: Σ over the latent vectors (last dimension = entries) of KL(N(μ, σ²) ‖ N(0, 1))."""
    mu, var = z.mean(-1), z.var(-1, unbiased=False)
    return (0.5 * (var + mu**2 - 1 - torch.log(var + 1e-10))).sum(-1)


@dataclass
class Matching:
    """What every victim's loss shares: the prior ``generator``, the attacked ``model``, the matched
    parameter ``names`` and their ``weights``, the ``distance``, ``match_released`` (compare only the
    entries the client released), ``samples`` (draws of stochastic layers averaged), the KL weight."""

    generator: nn.Module
    model: nn.Module
    info: DatasetInfo
    names: list[str]
    weights: list[float]
    distance: str
    match_released: bool
    samples: int
    kl: float

    @property
    def scale(self) -> float:
        """GGL averages the squared distances over layers; the cosine distance is already normalized."""
        return 1.0 if self.distance == "cosine" else 1.0 / len(self.names)

    def loss(
        self, z: torch.Tensor, y: torch.Tensor, view: ServerView, target: Sequence[torch.Tensor],
        generator: nn.Module | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """(loss, gradient distance) of one victim through its replayed protocol (any algorithm)."""
        x = self.info.normalize((generator or self.generator)(z, y))
        dummy, _ = dummy_update(self.model, self.names, x, y, view, self.samples)
        if self.match_released:
            dummy = [d * (t != 0) for d, t in zip(dummy, target, strict=True)]
        distance = DISTANCES[self.distance](dummy, list(target), self.weights) * self.scale
        return distance + self.kl * kl_prior(z), distance


class MappedLoss:
    """One victim's loss as a pure function of z, for ``vmap`` over victims (``step``: gradient and
    values) or over a CMA-ES population of one victim (``values``)."""

    def __init__(self, matching: Matching) -> None:
        self.matching = matching
        self.objective = VectorizedObjective(
            matching.model,
            matching.names,
            distance=matching.distance,
            weights=matching.weights,
            match_released=matching.match_released,
        )
        G = matching.generator
        self.state = {k: v.detach() for k, v in [*G.named_parameters(), *G.named_buffers()]}
        self.step = vmap(grad(self.pure, has_aux=True))

    def pure(
        self, z: torch.Tensor, y: torch.Tensor, *targets: torch.Tensor
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        x = self.matching.info.normalize(functional_call(self.matching.generator, self.state, (z, y)))
        distance, _ = self.objective.objective(x, y, *targets)
        distance = distance * self.matching.scale
        loss = distance + self.matching.kl * kl_prior(z)
        return loss, (loss.detach(), distance.detach())

    def values(
        self, population: torch.Tensor, y: torch.Tensor, targets: Sequence[torch.Tensor]
    ) -> torch.Tensor:
        """The loss of every candidate z of ``population`` (P × batch × latent) for one victim."""
        dims = (0, None, *([None] * len(targets)))
        loss, _ = vmap(self.pure, in_dims=dims)(population, y, *targets)
        return loss.detach()


@dataclass
class SearchResult:
    """Per victim: the best latent, its gradient distance, and the generator that produced it (GIAS)."""

    z: torch.Tensor
    distance: float
    generator: nn.Module


def adam_mapped(
    loss: MappedLoss, z0: torch.Tensor, y: torch.Tensor, targets: Sequence[torch.Tensor],
    steps: int, lr: float, progress: bool,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Adam on the stacked latents of V victims (element-wise: V independent optimizers); returns the
    best latent seen per victim and its gradient distance."""
    z = z0.clone().requires_grad_(True)
    opt = torch.optim.Adam([z], lr=lr)
    best = z0.clone()
    best_distance = torch.full((len(z0),), math.inf, device=z0.device)
    for _ in tqdm(range(steps), desc="GGL (Adam on z)", disable=not progress, leave=False):
        g, (_, distance) = loss.step(z.detach(), y, *targets)
        better = torch.isfinite(distance) & (distance < best_distance)
        best[better], best_distance[better] = z.detach()[better], distance[better]
        z.grad = torch.nan_to_num(g)
        opt.step()
    return best, best_distance


def adam_one(
    matching: Matching, z0: torch.Tensor, y: torch.Tensor, view: ServerView, target: Sequence[torch.Tensor],
    steps: int, lr: float,
) -> tuple[torch.Tensor, float]:  # fmt: skip
    """Adam on one victim's latent through the replayed protocol; the best latent seen and its distance."""
    z = z0.clone().requires_grad_(True)
    opt = torch.optim.Adam([z], lr=lr)
    best, best_distance = z0.clone(), math.inf
    for _ in range(steps):
        total, distance = matching.loss(z, y, view, target)
        value = float(distance.detach())
        if math.isfinite(value) and value < best_distance:
            best, best_distance = z.detach().clone(), value
        opt.zero_grad()
        total.backward()
        opt.step()
    return best, best_distance


def cma_one(
    score: Callable[[torch.Tensor], torch.Tensor], z0: torch.Tensor, *, generations: int, sigma: float,
    population: int | None, seed: int,
) -> tuple[torch.Tensor, float]:  # fmt: skip
    """CMA-ES (Hansen's ``cma``) from ``z0``; ``score`` maps a population (P × batch × latent) to losses.
    Returns the best latent evaluated and its loss. numpy's global random state is left as it was."""
    try:
        import cma
    except ImportError:
        raise ConfigError("optimizer: 'cma' needs the cma package (pip install 'leakshield[cma]')") from None
    options = {"seed": seed % (2**31 - 2) + 1, "verbose": -9, "maxiter": generations, "tolfun": 0,
               "tolx": 0, "tolfunhist": 0, "tolstagnation": generations + 1}  # fmt: skip
    if population is not None:
        options["popsize"] = population
    state = np.random.get_state()
    try:
        es = cma.CMAEvolutionStrategy(z0.flatten().cpu().double().numpy(), sigma, options)
        while not es.stop():
            candidates = es.ask()
            batch = torch.as_tensor(np.stack(candidates), dtype=z0.dtype, device=z0.device)
            losses = score(batch.view(len(candidates), *z0.shape)).double().cpu()
            es.tell(candidates, torch.nan_to_num(losses, nan=1e30, posinf=1e30).tolist())
        best = torch.as_tensor(es.result.xbest, dtype=z0.dtype, device=z0.device).view_as(z0)
        return best, float(es.result.fbest)
    finally:
        np.random.set_state(state)


def tune_generator(
    matching: Matching, z: torch.Tensor, y: torch.Tensor, view: ServerView, target: Sequence[torch.Tensor],
    steps: int, lr: float,
) -> tuple[nn.Module, float]:  # fmt: skip
    """GIAS: a copy of the generator whose weights Adam tunes on this victim's loss, z fixed (BatchNorm
    statistics frozen). Returns the copy with the best weights seen and their gradient distance."""
    generator = copy.deepcopy(matching.generator).eval()
    for p in generator.parameters():
        p.requires_grad_(True)
    opt = torch.optim.Adam(generator.parameters(), lr=lr)
    best_state, best_distance = copy.deepcopy(generator.state_dict()), math.inf
    for _ in range(steps):
        total, distance = matching.loss(z, y, view, target, generator)
        value = float(distance.detach())
        if math.isfinite(value) and value < best_distance:
            best_state, best_distance = copy.deepcopy(generator.state_dict()), value
        opt.zero_grad()
        total.backward()
        opt.step()
    _, distance = matching.loss(z, y, view, target, generator)
    if math.isfinite(float(distance.detach())) and float(distance.detach()) < best_distance:
        return generator.requires_grad_(False), float(distance.detach())
    generator.load_state_dict(best_state)
    return generator.requires_grad_(False), best_distance
