"""Does a federation's DP do what it says? Canary clients (:mod:`leakshield.crossdevice.canary_clients`)
are inserted into a cross-device DP-FedAvg run; the cosines of what the federation released with the
inserted canaries, against those with the held-out ones, give in the same run

* Andrew et al.'s (ICLR 2024) ε **estimate** (:mod:`leakshield.dpaudit.estimate`), and
* Steinke et al.'s (NeurIPS 2023) one-run ε **lower bound** (:mod:`leakshield.dpaudit.lower_bound`),

beside the accountant's ε (add/remove of one client, the relation a canary's coin is), for three
observers: each round's released aggregate Δ̄_t alone (compared with the accountant's ε through round t:
Δ̄_t depends on every earlier round), the final model's change θ_T − θ_0 (one who sees only the model
the federation publishes), and every round (a canary's largest cosine over the rounds: who sees every
global model).

The verdict tests the claimed ε with the final-model and all-rounds lower bounds, each at half the
significance: ``refuted`` when one exceeds the claim (the run is not (ε, δ)-DP at the claimed ε, at the
stated confidence), ``suspect`` when the estimate's interval lies above the claim and the canaries are
detectable (a lower bound above 0) though not enough to refute it, else ``consistent`` (the audit found
nothing, which does not prove the claim). The estimate alone never makes a run suspect: fitted to a few
hundred canaries a side it reads ε ≈ 0.6 where the truth is 0 (docs/dp-audit.md).

The per-round readings run at the full confidence each, uncorrected across rounds: for a mechanism
that meets its ε exactly, about one round in twenty may show a bound above that round's ε by chance.
They are shown, not tested."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pydantic
import torch

from leakshield.crossdevice.accounting import poisson_epsilon
from leakshield.crossdevice.canary_clients import CanaryClients, flat
from leakshield.crossdevice.federation import (
    CrossDeviceSettings,
    default_delta,
    initial_model,
    run_federation,
)
from leakshield.crossdevice.models import Params
from leakshield.crossdevice.population import Population
from leakshield.dpaudit.estimate import Estimate, one_shot_estimate
from leakshield.dpaudit.lower_bound import LowerBound, one_run_lower_bound


class AuditSettings(pydantic.BaseModel):
    """canaries: m, half of them inserted by coin (more canaries: a higher ceiling for the lower bound,
    3.86 at 1,000 and 95 %, growing about like ln(m/20) while m·δ is small). confidence of the lower
    bound and of the estimate's interval. resamples: bootstrap draws of a whole-run estimate (a round's:
    at most 200; memory: resamples × m numbers)."""

    model_config = pydantic.ConfigDict(extra="forbid", allow_inf_nan=False)
    canaries: int = pydantic.Field(default=1000, ge=8, le=20_000)
    confidence: float = pydantic.Field(default=0.95, gt=0.5, lt=1)
    resamples: int = pydantic.Field(default=1000, ge=100, le=10_000)


@dataclass(frozen=True)
class Reading:
    """One observer's audit: the estimate, the lower bound and the accountant's ε it is held against."""

    observer: str
    estimate: Estimate
    lower_bound: LowerBound
    accountant: float


@dataclass
class DPAudit:
    """The audit of one run. ``rounds``: a :class:`Reading` per round; ``final`` and ``all_rounds``:
    the whole run's; ``scores``: the cosines behind them (``{observer: {"in": [...], "out": [...]}}``)."""

    claimed_epsilon: float
    accountant_epsilon: float
    delta: float
    verdict: str
    reason: str
    final: Reading
    all_rounds: Reading
    rounds: list[Reading]
    scores: dict[str, dict[str, list[float]]]
    accuracy: float
    settings: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain JSON-ready values (∞ stays a float)."""
        return asdict(self)


class CanaryScores:
    """Accumulates, round by round, the cosine of each released aggregate and of the model's change
    so far with every canary direction (what :func:`run_federation` ``observe`` calls)."""

    def __init__(self, canaries: CanaryClients, settings: CrossDeviceSettings) -> None:
        self.canaries = canaries
        self.momentum, self.lr = settings.server_momentum, settings.server_lr
        self.per_round: list[np.ndarray] = []
        self.velocity: torch.Tensor | None = None
        self.change: torch.Tensor | None = None

    def __call__(self, round_: int, mean: Params) -> None:
        v = flat(mean).detach().double().cpu()
        self.per_round.append(self.canaries.cosines(v.numpy()))
        self.velocity = v if self.velocity is None else self.momentum * self.velocity + v
        self.change = (
            self.lr * self.velocity if self.change is None else self.change + self.lr * self.velocity
        )

    def final(self) -> np.ndarray:
        """Each canary's cosine with the model's whole change θ_T − θ_0."""
        assert self.change is not None
        return self.canaries.cosines(self.change.numpy())


#: bootstrap draws of a single round's estimate (shown, not tested): at most this many
ROUND_RESAMPLES = 200


def _reading(observer: str, scores: np.ndarray, included: np.ndarray, delta: float, accountant: float,
             audit: AuditSettings, confidence: float, seed: int, resamples: int) -> Reading:  # fmt: skip
    x, y = scores[included], scores[~included]
    est = one_shot_estimate(x, y, delta, resamples=resamples, confidence=audit.confidence, seed=seed)
    return Reading(observer, est, one_run_lower_bound(x, y, delta, confidence=confidence), accountant)


def _verdict(claimed: float, final: Reading, every: Reading) -> tuple[str, str]:
    lower = max(final.lower_bound.epsilon, every.lower_bound.epsilon)
    low = max(final.estimate.low, every.estimate.low)
    conf = f"{final.lower_bound.confidence:.3g}"
    if math.isinf(claimed):
        return "no claim", f"no finite ε is claimed; the canaries show ε ≥ {lower:.3g} (confidence {conf})"
    if lower > claimed:
        return "refuted", (f"the run is not DP at the claimed ε = {claimed:.3g}: the canaries show ε ≥ "
                           f"{lower:.3g} (confidence {conf})")  # fmt: skip
    if low > claimed and lower > 0:
        return "suspect", (f"the estimate's interval lies above the claimed ε = {claimed:.3g} (from "
                           f"{low:.3g}) though the lower bound ({lower:.3g}) does not exceed it")  # fmt: skip
    return "consistent", (f"nothing found against ε = {claimed:.3g}: lower bound {lower:.3g}, estimate "
                          f"{max(final.estimate.epsilon, every.estimate.epsilon):.3g}")  # fmt: skip


def audit_scores(per_round: list[np.ndarray], final: np.ndarray, included: np.ndarray, delta: float,
                 accountant: Callable[[int], float], claimed_epsilon: float | None, audit: AuditSettings,
                 *, seed: int = 0, accuracy: float = math.nan,
                 settings: dict[str, Any] | None = None) -> DPAudit:  # fmt: skip
    """The audit of a run from its canaries' cosines: ``per_round`` (one array over the canaries per
    round), ``final`` (with the model's whole change); ``accountant(t)``: the ε of the first t rounds
    (∞ without noise); ``claimed_epsilon``: default the accountant's for the whole run."""
    total = accountant(len(per_round))
    claimed = total if claimed_epsilon is None else float(claimed_epsilon)
    every_scores = np.max(np.stack(per_round), axis=0)
    half = 1 - (1 - audit.confidence) / 2  # the verdict's two bounds share the significance
    final_r = _reading("final model", final, included, delta, total, audit, half, seed, audit.resamples)
    every = _reading("all rounds", every_scores, included, delta, total, audit, half, seed, audit.resamples)
    few = min(audit.resamples, ROUND_RESAMPLES)
    rounds = [
        _reading(f"round {t}", s, included, delta, accountant(t + 1), audit, audit.confidence, seed, few)
        for t, s in enumerate(per_round)
    ]
    verdict, reason = _verdict(claimed, final_r, every)
    kept = {name: {"in": s[included].tolist(), "out": s[~included].tolist()}
            for name, s in (("final model", final), ("all rounds", every_scores))}  # fmt: skip
    return DPAudit(
        claimed, total, delta, verdict, reason, final_r, every, rounds, kept, accuracy, settings or {}
    )


def audit_federation(
    population: Population,
    settings: CrossDeviceSettings,
    seed: int = 0,
    *,
    audit: AuditSettings | None = None,
    claimed_epsilon: float | None = None,
    client_filter: Callable[[Params], Params] | None = None,
    progress: Callable[[int], None] | None = None,
    device: str | torch.device = "cpu",
) -> DPAudit:
    """Run the federation once with canaries and audit it. ``claimed_epsilon``: the ε the deployment
    states (default: the accountant's add/remove ε of ``settings``; ∞ without noise). The canaries are
    drawn from ``seed`` (their own stream). ``client_filter``: see :func:`run_federation`."""
    audit = audit or AuditSettings()
    dim = sum(t.numel() for t in initial_model(population, settings, seed).values())
    canaries = CanaryClients.draw(audit.canaries, dim, 7_919 * seed + 3)
    scores = CanaryScores(canaries, settings)
    result = run_federation(
        population,
        settings,
        seed,
        progress=progress,
        device=device,
        canaries=canaries,
        client_filter=client_filter,
        observe=scores,
    )
    dp = settings.dp
    delta = dp.delta if dp.delta is not None else default_delta(population.clients)
    noised = dp.mode == "central" and dp.noise_multiplier > 0

    def accountant(rounds: int) -> float:
        if not noised:
            return math.inf
        return poisson_epsilon(dp.noise_multiplier, settings.sample_rate, rounds, delta, "add-remove")

    info = {"federation": settings.model_dump(mode="json"), "audit": audit.model_dump(), "seed": seed}
    included = canaries.included.numpy()
    return audit_scores(scores.per_round, scores.final(), included, delta, accountant, claimed_epsilon, audit,
                        seed=seed, accuracy=result.final_accuracy, settings=info)  # fmt: skip
