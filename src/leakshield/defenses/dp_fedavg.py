"""Client-level differential privacy: DP-FedAvg (McMahan et al., *Learning Differentially Private
Recurrent Language Models*, ICLR 2018, Algorithm 1), the guarantee FL deployments use. Two records are
adjacent when they differ in one client's whole dataset.

Every client clips its update Δ to global L2 norm S: Δ·min(1, S/||Δ||). Then

* ``mode: central`` — the server averages the round's m clipped updates with equal weights and adds
  N(0, (σ·S/m)²) to every entry of the mean; it replaces the aggregator (``fl.aggregator: mean`` only).
  Flower's ``DifferentialPrivacyClientSideFixedClipping`` with ``fixedclipping_mod`` adds the same
  noise to FedAvg's sample-weighted mean: the same mechanism when clients hold equally many samples.
  The server itself sees every clipped update: central DP protects the model the federation publishes,
  and everyone who sees only the global models (another participant), never against the server. Its
  leakage to an honest-but-curious server is clipping's.
* ``mode: local`` — each client adds N(0, (σ·S)²) to its own clipped update before it leaves (Flower's
  ``LocalDpMod`` calibrates the same Gaussian from (ε, δ) per release): the server sees noisy updates.

Privacy is accounted per client with Opacus's PRV accountant (Gopi et al., *Numerical Composition of
Differential Privacy*, NeurIPS 2021), numerically tight, with its ε error set to 0.2 % of the RDP
accountant's ε: central, T rounds of the Gaussian mechanism on the aggregate subsampled at the server's
client sampling rate q (clients per round / clients; the accountant assumes Poisson sampling of clients,
the server here draws a fixed number, the usual approximation); local, each client's own releases,
one Gaussian mechanism of σ per round it took part in, with no amplification (the server knows who was
sampled). ``accountant: rdp`` reports Opacus's RDP bound instead (the accountant of DP-SGD's rows and of
Flower's DP strategies). BatchNorm running statistics are averaged as usual, unclipped and without
noise: they lie outside the guarantee.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Mapping, Sequence
from typing import Literal

import pydantic
import torch

from leakshield.crossdevice.accounting import VACUOUS, add_remove_below_bound  # noqa: F401  (VACUOUS: its path in 0.2)
from leakshield.defenses.base import DEFENSES, ClientContext, Defense, Participation
from leakshield.defenses.clipping import clipped
from leakshield.defenses.dpsgd import MAX_NOISE_MULTIPLIER, check_finite_noise, dp_epsilon
from leakshield.defenses.noise import standard_noise
from leakshield.registry import Params


class DPFedAvgParams(Params):
    """mode: ``central`` (the server noises the mean) or ``local`` (each client noises its update).
    noise_multiplier: σ, the noise's std over the clipping bound (z in McMahan et al.). clip: S, the
    largest L2 norm of a client's update. delta: the δ at which ε is reported. accountant: ``prv``
    (tight, the default) or ``rdp`` (an upper bound; Flower's and DP-SGD's)."""

    mode: Literal["central", "local"] = "central"
    noise_multiplier: float = pydantic.Field(default=1.0, ge=0, le=MAX_NOISE_MULTIPLIER)
    clip: float = pydantic.Field(default=1.0, gt=0)
    delta: float = pydantic.Field(default=1e-5, gt=0, lt=1)
    accountant: Literal["prv", "rdp"] = "prv"

    @pydantic.model_validator(mode="after")
    def _finite_noise(self) -> DPFedAvgParams:
        check_finite_noise(self.noise_multiplier, self.clip)
        return self


@functools.lru_cache(maxsize=1024)
def client_level_epsilon(
    noise_multiplier: float, sample_rate: float, releases: int, delta: float, accountant: str = "prv"
) -> float:
    """ε after ``releases`` Gaussian mechanisms of noise multiplier σ, each on a population subsampled
    at ``sample_rate`` (1: no subsampling), at ``delta``: Opacus's PRV accountant (``prv``; the RDP bound
    where that exceeds :data:`VACUOUS`) or RDP accountant (``rdp``)."""
    if accountant not in ("prv", "rdp"):
        raise ValueError(f"accountant {accountant!r}: prv or rdp")
    with warnings.catch_warnings():  # Opacus warns when the best RDP order is at the end of its range
        warnings.filterwarnings("ignore", "Optimal order is the")  # (the bound stays valid, if loose);
        bound = dp_epsilon(noise_multiplier, sample_rate, releases, delta)  # refuses what has no meaning
    if accountant == "rdp":
        return bound
    return add_remove_below_bound(noise_multiplier, sample_rate, releases, delta, bound)


@DEFENSES.register(
    "dp-fedavg",
    summary="client-level DP: clip each update to S, Gaussian noise σ·S on the mean (central) or on each "
    "update (local), ε from Opacus's PRV accountant [central, σ 1.0, S 1.0, δ 1e-5]",
    reference="McMahan et al., Learning Differentially Private Recurrent Language Models, ICLR 2018; "
    "Gopi et al., NeurIPS 2021 (PRV accountant)",
    params=DPFedAvgParams,
    aliases={"client-dp": {}, "dp-fedavg-local": {"mode": "local"}},
)
class DPFedAvg(Defense):
    """Release stage: clip (and, locally, noise) the update; server stage (central): the noisy mean."""

    params: DPFedAvgParams

    def release_hook(
        self, update: dict[str, torch.Tensor], context: ClientContext
    ) -> dict[str, torch.Tensor]:
        p = self.params
        out = clipped(update, p.clip)
        if p.mode == "local" and p.noise_multiplier > 0:
            std = p.noise_multiplier * p.clip
            out = {k: v + std * standard_noise(v, context.generator, "gaussian") for k, v in out.items()}
        return out

    def aggregate_hook(
        self, updates: Sequence[dict[str, torch.Tensor]], generator: torch.Generator
    ) -> dict[str, torch.Tensor] | None:
        p = self.params
        if p.mode != "central" or not updates:
            return None
        m = len(updates)
        std = p.noise_multiplier * p.clip / m
        return {
            name: sum(u[name] for u in updates) / m + std * standard_noise(first, generator, "gaussian")  # type: ignore[misc]
            for name, first in updates[0].items()
        }

    def privacy_spent(
        self, client_steps: Mapping[int, tuple[int, float]], participation: Participation | None = None
    ) -> dict[str, float]:
        """Client-level ε (module docstring); empty without the clients' participation."""
        p = self.params
        if participation is None:
            return {}
        if p.mode == "central":
            eps = client_level_epsilon(
                p.noise_multiplier, participation.sample_rate, participation.total_rounds, p.delta,
                p.accountant,
            )  # fmt: skip
        else:
            rounds = max(participation.rounds.values(), default=0)
            eps = client_level_epsilon(p.noise_multiplier, 1.0, rounds, p.delta, p.accountant)
        return {"epsilon_client": eps, "delta": p.delta}
