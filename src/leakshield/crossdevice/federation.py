"""DP-FedAvg in a cross-device federation (McMahan, Ramage, Talwar & Zhang, *Learning Differentially
Private Recurrent Language Models*, ICLR 2018, Algorithm 1, with the server momentum of their
experiments and the adaptive clipping of Andrew et al. 2021).

Clients are weighted equally (McMahan et al. cap each weight at min(n_k/ŵ, 1); with 2–35 reviews or
images a client, equal weights bound the sensitivity without that cap). Each round the server samples
clients (``poisson``: each with probability q; ``fixed``: m of N without
replacement); every sampled client runs ``local_epochs`` of minibatch SGD from the global model (all of
them at once: ``torch.func.vmap`` over the padded population) and sends Δ_k = θ_k − θ, clipped to norm
S. Then

* ``dp.mode: central`` — the server adds N(0, (z·S)²) to the sum (with adaptive clipping (z_Δ·C)², the
  updates' share of z, :mod:`leakshield.crossdevice.clipping`) and divides by the *expected* count
  (q·N, or m): McMahan et al.'s fixed-denominator estimator, whose sensitivity is S/(qN) whoever came;
* ``dp.mode: local`` — each client adds N(0, (z·S)²) to its own clipped update (the server sees it so)
  and the server averages what came;
* ``dp.mode: none`` — the plain mean of the unclipped updates.

The server step is θ ← θ + η_s·v with v ← β·v + Δ̄ (β = 0.9, η_s = 1 as McMahan et al.).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import pydantic
import torch
from torch.func import grad, vmap
from torch.nn import functional as F

from leakshield.crossdevice.accounting import fixed_size_epsilon, gaussian_epsilon, poisson_epsilon
from leakshield.crossdevice.canary_clients import CanaryClients
from leakshield.crossdevice.clipping import AdaptiveClip, clip_updates, update_noise_multiplier, update_norms
from leakshield.crossdevice.models import Params, accuracy, bag_classifier, logits_for, mlp_classifier
from leakshield.crossdevice.population import Population
from leakshield.errors import ConfigError


class DPSettings(pydantic.BaseModel):
    """mode: none, central (the server noises the sum) or local (each client noises its update).
    noise_multiplier: z. clip: S, or adaptive clipping's starting C. adaptive: Andrew et al.'s quantile
    clipping (central only) with target_quantile γ, clip_lr η_C and count_stddev σ_b (default: the
    expected clients per round / 20 as Andrew et al., but at least z, so that the clipped-count bits
    take at most a quarter of the budget in a small federation). delta: δ (default min(1e-5, 1/N^1.1))."""

    model_config = pydantic.ConfigDict(extra="forbid", allow_inf_nan=False)
    mode: Literal["none", "central", "local"] = "central"
    noise_multiplier: float = pydantic.Field(default=1.0, ge=0, le=1e3)
    clip: float = pydantic.Field(default=1.0, gt=0)
    adaptive: bool = False
    target_quantile: float = pydantic.Field(default=0.5, gt=0, lt=1)
    clip_lr: float = pydantic.Field(default=0.2, gt=0)
    count_stddev: float | None = pydantic.Field(default=None, gt=0)
    delta: float | None = pydantic.Field(default=None, gt=0, lt=1)

    @pydantic.model_validator(mode="after")
    def _adaptive_is_central(self) -> DPSettings:
        if self.adaptive and self.mode != "central":
            raise ValueError(f"dp.adaptive: quantile clipping is a central mechanism; mode is {self.mode}")
        return self


class CrossDeviceSettings(pydantic.BaseModel):
    """rounds; sampling (poisson or fixed) at sample_rate q (fixed: m = round(q·N)); local_epochs,
    local_batch, local_lr of each client's SGD; server_lr η_s and server_momentum β; width of the
    model's hidden layer (text: embedding width); eval_every rounds; dp (:class:`DPSettings`)."""

    model_config = pydantic.ConfigDict(extra="forbid", allow_inf_nan=False)
    rounds: int = pydantic.Field(default=300, ge=1, le=100_000)
    sampling: Literal["poisson", "fixed"] = "poisson"
    sample_rate: float = pydantic.Field(default=0.05, gt=0, le=1)
    local_epochs: int = pydantic.Field(default=1, ge=1, le=100)
    local_batch: int = pydantic.Field(default=10, ge=1)
    local_lr: float = pydantic.Field(default=0.5, gt=0)
    server_lr: float = pydantic.Field(default=1.0, gt=0)
    server_momentum: float = pydantic.Field(default=0.9, ge=0, lt=1)
    width: int = pydantic.Field(default=16, ge=1, le=4096)
    eval_every: int = pydantic.Field(default=25, ge=1)
    dp: DPSettings = pydantic.Field(default_factory=DPSettings)


@dataclass
class Released:
    """What one round showed: the sampled clients, their updates as the server received them
    (clipped; with local noise, noised), the server's aggregate Δ̄ (what anyone holding consecutive
    global models recovers, momentum removed) and the noise std per entry of each (0 without noise)."""

    round: int
    clients: torch.Tensor
    updates: Params
    aggregate: Params
    update_noise_std: float
    aggregate_noise_std: float
    model: Params


@dataclass
class FederationResult:
    """Test accuracy by round, the final accuracy, the clip bound by round, ε by adjacency (``None``
    where no accountant applies), δ, rounds per second, and the captured rounds."""

    accuracy: dict[int, float]
    final_accuracy: float
    clip: list[float]
    epsilon: dict[str, float | None]
    delta: float
    rounds_per_second: float
    captured: list[Released] = field(default_factory=list)


def _normal(shape: torch.Size, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    return torch.randn(shape, generator=generator).to(device)


def _cpu(tensors: Params) -> Params:
    return {k: t.detach().to("cpu", copy=True) for k, t in tensors.items()}


def initial_model(population: Population, settings: CrossDeviceSettings, seed: int) -> Params:
    if population.kind == "text":
        return bag_classifier(population.vocab, population.classes, settings.width, seed)
    return mlp_classifier(population.x.shape[-1], population.classes, settings.width, seed)


def sample_clients(
    population: int, settings: CrossDeviceSettings, generator: torch.Generator
) -> torch.Tensor:
    """This round's client ids: Poisson (each with probability q) or a fixed m = round(q·N)."""
    if settings.sampling == "poisson":
        return (torch.rand(population, generator=generator) < settings.sample_rate).nonzero().flatten()
    m = max(1, round(settings.sample_rate * population))
    return torch.randperm(population, generator=generator)[:m].sort().values


def local_updates(params: Params, population: Population, clients: torch.Tensor,
                  settings: CrossDeviceSettings, generator: torch.Generator) -> Params:  # fmt: skip
    """Δ_k for every listed client: ``local_epochs`` of minibatch SGD from ``params`` (each epoch a fresh
    order of the client's own rows; padding rows carry no weight), all clients at once."""
    forward = logits_for(population.kind)

    def batch_loss(p: Params, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        loss = F.cross_entropy(forward(p, x), y, reduction="none")
        return (loss * w).sum() / w.sum().clamp(min=1)

    step = vmap(grad(batch_loss))
    clients = clients.to(population.x.device)
    x, y, valid = population.x[clients], population.y[clients], population.valid[clients].float()
    k, rows = valid.shape
    local = {name: t.unsqueeze(0).expand(k, *t.shape).clone() for name, t in params.items()}
    for _ in range(settings.local_epochs):
        # valid rows first in a random order, padding after: every batch but a client's last is full
        keys = torch.rand(k, rows, generator=generator).to(valid.device) + (1 - valid) * 2
        order = keys.argsort(1)
        for start in range(0, int(valid.sum(1).max()), settings.local_batch):
            idx = order[:, start : start + settings.local_batch]
            bx = torch.gather(x, 1, idx.view(k, -1, *([1] * (x.dim() - 2))).expand(-1, -1, *x.shape[2:]))
            g = step(local, bx, torch.gather(y, 1, idx), torch.gather(valid, 1, idx))
            local = {name: local[name] - settings.local_lr * g[name] for name in local}
    return {name: local[name] - params[name].unsqueeze(0) for name in params}


def _canaries_within_bound(norms: torch.Tensor, canary: torch.Tensor, bound: float) -> torch.Tensor:
    """A canary's update is the bound by construction: its norm, ``bound·c_i`` in float32, may round
    either side of the bound, which would let rounding decide whether adaptive clipping counts it as
    clipped. Canary rows are held at most at the bound (real rows unchanged)."""
    return torch.where(canary.to(norms.device), norms.clamp(max=bound), norms)


def _client_updates(params: Params, population: Population, chosen: torch.Tensor,
                    settings: CrossDeviceSettings, generator: torch.Generator,
                    canaries: CanaryClients | None, bound: float) -> Params:  # fmt: skip
    """Δ_k of the chosen clients in their order: real clients train (:func:`local_updates`), canaries
    (ids ≥ N) send bound·c_i."""
    n = population.clients
    real = chosen[chosen < n]
    if canaries is None or len(real) == len(chosen):
        return local_updates(params, population, real, settings, generator)
    fake = canaries.updates(chosen[chosen >= n] - n, bound, params)
    if not len(real):
        return fake
    trained = local_updates(params, population, real, settings, generator)
    return {k: torch.cat([trained[k], fake[k]]) for k in params}  # chosen is sorted: real ids first


def default_delta(clients: int) -> float:
    """δ = min(10⁻⁵, 1/N^1.1). McMahan et al.'s 1/N^1.1 was set for N ≈ 760,000; at a few hundred
    clients it leaves N·δ ≈ 0.6, a guarantee that allows one client in two to be published."""
    return min(1e-5, 1.0 / clients**1.1)


def client_epsilon(settings: CrossDeviceSettings, clients: int, participations: torch.Tensor,
                   delta: float) -> dict[str, float | None]:  # fmt: skip
    """ε of the run for both adjacencies (:mod:`leakshield.crossdevice.accounting`); ``None`` where
    the relation has no meaning. Local noise: the server sees who sent, so add/remove is not defined;
    ``replace-one`` (the client's data changed, sensitivity 2S) and ``zero-out`` (its update replaced
    by zeros, sensitivity S; Kairouz et al. 2021) are, for the client that took part most often."""
    dp = settings.dp
    if dp.mode == "none":
        return {"add-remove": math.inf, "replace-one": math.inf}
    z, q, t = dp.noise_multiplier, settings.sample_rate, settings.rounds
    if dp.mode == "local":
        most = int(participations.max()) if len(participations) else 0
        return {"add-remove": None, "replace-one": gaussian_epsilon(z, most, delta, "replace-one"),
                "zero-out": gaussian_epsilon(z, most, delta, "add-remove")}  # fmt: skip
    if settings.sampling == "fixed":
        m = max(1, round(q * clients))
        return {"add-remove": None, "replace-one": fixed_size_epsilon(z, m, clients, t, delta)}
    return {adj: poisson_epsilon(z, q, t, delta, adj) for adj in ("add-remove", "replace-one")}


def check_canaries(settings: CrossDeviceSettings) -> None:
    """Refuse settings a canary audit cannot test (one line each)."""
    if settings.sampling != "poisson":
        raise ConfigError("canaries: a canary's presence is add/remove adjacency, which fixed-size sampling "
                          "does not define; use sampling: poisson")  # fmt: skip
    if settings.dp.mode == "local":
        raise ConfigError("canaries: under local noise the server sees who sent; audit central or none")


def run_federation(population: Population, settings: CrossDeviceSettings, seed: int = 0, *,
                   capture: tuple[int, ...] = (), progress: Callable[[int], None] | None = None,
                   device: str | torch.device = "cpu", canaries: CanaryClients | None = None,
                   client_filter: Callable[[Params], Params] | None = None,
                   observe: Callable[[int, Params], None] | None = None) -> FederationResult:  # fmt: skip
    """Train the federation for ``settings.rounds`` rounds from the seeded initial model; ``capture``:
    the rounds whose releases are kept (:class:`Released`, on the CPU), for the attacks. Random draws
    come from seeded CPU generators whatever the ``device``, so a seed samples the same clients there.

    ``canaries``: :class:`CanaryClients` whose included ones join the population as clients N + i (Poisson
    sampling, central or no noise); the server then divides by q·(N + m/2), the expected count of a
    population whose m canaries are coins; adaptive clipping counts a canary as unclipped. ``client_filter``:
    applied by every client to its update before clipping, on a batch of updates (leading client
    dimension, canaries included): it must treat each row on its own. ``observe(round, mean)``: called with
    every round's released aggregate Δ̄."""
    dp = settings.dp
    population = population.to(device)
    n = population.clients
    if canaries is not None:
        check_canaries(settings)
    g_model = torch.Generator().manual_seed(seed)
    g_sample = torch.Generator().manual_seed(10_007 * seed + 1)
    g_noise = torch.Generator().manual_seed(10_007 * seed + 2)
    params = {k: t.to(device) for k, t in initial_model(population, settings, seed).items()}
    velocity = {name: torch.zeros_like(t) for name, t in params.items()}
    m = canaries.count if canaries is not None else 0
    expected = (
        settings.sample_rate * (n + m / 2)
        if settings.sampling == "poisson"
        else max(1, round(settings.sample_rate * n))
    )
    delta = dp.delta if dp.delta is not None else default_delta(n)
    z_updates = dp.noise_multiplier
    clip = AdaptiveClip(dp.clip) if dp.adaptive else None
    if clip is not None:
        clip.target_quantile, clip.learning_rate = dp.target_quantile, dp.clip_lr
        clip.count_stddev = (
            dp.count_stddev if dp.count_stddev is not None else max(expected / 20, dp.noise_multiplier)
        )
        z_updates = update_noise_multiplier(dp.noise_multiplier, clip.count_stddev)
    participations = torch.zeros(n + m, dtype=torch.long)
    history: dict[int, float] = {}
    bounds: list[float] = []
    captured: list[Released] = []
    start = time.perf_counter()
    for r in range(settings.rounds):
        chosen = sample_clients(n + m, settings, g_sample)  # on the CPU
        if canaries is not None:  # an excluded canary is no client: its draw is discarded
            chosen = chosen[(chosen < n) | canaries.included[(chosen - n).clamp(min=0)]]
        participations[chosen] += 1
        bound = clip.bound if clip is not None else dp.clip
        bounds.append(bound)
        if len(chosen):
            deltas = _client_updates(params, population, chosen, settings, g_model, canaries, bound)
            if client_filter is not None:
                deltas = client_filter(deltas)
            norms = _canaries_within_bound(update_norms(deltas), chosen >= n, bound)
            if dp.mode == "none":
                sent, sum_noise, denominator, sent_std = deltas, 0.0, len(chosen), 0.0
            else:
                sent = clip_updates(deltas, bound, norms)  # the norms the adaptive count reads
                sent_std = z_updates * bound if dp.mode == "local" else 0.0
                if sent_std > 0:
                    sent = {k: v + sent_std * _normal(v.shape, g_noise, v.device) for k, v in sent.items()}
                sum_noise = z_updates * bound if dp.mode == "central" else 0.0
                denominator = expected if dp.mode == "central" else len(chosen)
            mean = {k: (v.sum(0) + sum_noise * _normal(v.shape[1:], g_noise, v.device)) / denominator
                    for k, v in sent.items()}  # fmt: skip
        else:  # nobody came (Poisson): central DP still releases noise on an empty sum
            sent, sent_std = {}, 0.0
            sum_noise = z_updates * bound if dp.mode == "central" else 0.0
            denominator = expected
            mean = {
                k: sum_noise * _normal(t.shape, g_noise, t.device) / denominator for k, t in params.items()
            }
        if clip is not None:  # the clipped count is released every round, an empty one too
            clip.step(norms.cpu() if len(chosen) else torch.zeros(0), expected, g_noise)
        if observe is not None:
            observe(r, mean)
        if r in capture:
            agg_std = math.sqrt(
                (sum_noise / denominator) ** 2 + len(chosen) * (sent_std / max(denominator, 1)) ** 2
            )
            captured.append(Released(r, chosen, _cpu(sent), _cpu(mean), sent_std, agg_std, _cpu(params)))
        for k in params:
            velocity[k] = settings.server_momentum * velocity[k] + mean[k]
            params[k] = params[k] + settings.server_lr * velocity[k]
        if (r + 1) % settings.eval_every == 0 or r + 1 == settings.rounds:
            history[r + 1] = accuracy(params, population.kind, population.test_x, population.test_y)
        if progress is not None:
            progress(r + 1)
    elapsed = time.perf_counter() - start
    final = history[settings.rounds]
    if not all(bool(torch.isfinite(t).all()) for t in params.values()):
        raise ConfigError("the federation diverged (the model holds inf or NaN): lower local_lr or server_lr")
    return FederationResult(history, final, bounds, client_epsilon(settings, n, participations, delta),
                            delta, settings.rounds / max(elapsed, 1e-9), captured)  # fmt: skip
