"""Membership attacks on a federation's updates, each a score per candidate record (higher = member)
computed from the :class:`~leakshield.membership.signals.Signals` its threat model can see. An attack
of one round runs at each attacked round (``loss@0``: the first round's local models); the attacker's
choice of round is part of choosing its strongest cell.

The honest-but-curious server that sees every client's update every round (catalogue C):

* ``fedmia`` — FedMIA-II, "all for one" (Zhu et al., *FedMIA: An Effective Membership Inference Attack
  Exploiting "All for One" Principle in Federated Learning*, CVPR 2025, Sec. 4): per round, the target
  client's cosine statistic for x is compared with a Gaussian fitted to the *other* clients' statistics
  for the same x (none of them holds it: the non-member distribution at no cost), one-tailed
  Φ((s_target − μ_others) / σ_others); the score is the mean of Φ over the rounds (the reference code's
  ``lira`` mode: population variance + 1e-8, the CDF averaged over rounds);
  ``fedmia-loss`` is FedMIA-I (the same test on −ℓ under each client's local model); ``fedmia-round``
  is FedMIA-II's test on one round alone (the round chosen like any attack's, not averaged);
* ``loss`` — the loss threshold of Yeom et al. (*Privacy Risk in Machine Learning*, CSF 2018): −ℓ(x)
  under the target client's local model of one round (FedMIA's Blackbox-Loss);
* ``loss-series`` — the same averaged over rounds (FedMIA's Loss-Series);
* ``gradient-cosine`` and ``gradient-diff`` — Li et al. (*Effective Passive Membership Inference Attacks
  in Federated Learning against Overparameterized Models*, ICLR 2023): cos(−∇ℓ(θ; x), s_target) and
  2⟨−∇ℓ, s⟩ − ‖∇ℓ‖² (FedMIA's Grad-Diff ‖Δ‖² − ‖Δ − ∇ℓ‖² with Δ = −s) at one round;
* ``cosine-series`` — the cosine averaged over rounds (FedMIA's Avg-Cosine).

What the global models reveal (a participating client; a server under secure aggregation, which learns
only the sum of each round's updates — the global step — and so at most what a participant learns):
``global-loss`` (under θ_{r+1}), ``global-loss-series``, ``global-cosine`` (cos with the global step,
averaged over rounds) and ``gradient-norm`` (−‖∇ℓ(θ_{r+1}; x)‖², at the released model; Li et al.).
They test membership in the federation's data, not in one client's. FedMIA needs per-client updates:
secure aggregation stops it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from leakshield.membership.signals import Signals
from leakshield.threats import Adversary, Rounds, Threat, threat

#: the honest-but-curious server reading every client's update in every round
SERVER = threat(Adversary.OBSERVING_SERVER, rounds=Rounds.SEVERAL)
#: what the global models reveal: a participating client, or the server under secure aggregation
GLOBAL = threat(Adversary.OBSERVING_SERVER, rounds=Rounds.SEVERAL, secure_aggregation=True)


@dataclass(frozen=True)
class MembershipAttack:
    """A registered membership attack: its score function, declared threat and reference."""

    name: str
    score: Callable[[Signals, int], np.ndarray]
    threat: Threat
    reference: str
    #: whether it reads one round (then attacked at each configured round) or the whole series
    per_round: bool = False

    @property
    def global_view(self) -> bool:
        """Whether it reads the global models only (works under secure aggregation)."""
        return self.threat.secure_aggregation


def owner_cosine(s: Signals) -> np.ndarray:
    """cos statistic of every candidate with its own client's step: rounds × candidates."""
    return s.cosine[:, s.owner, np.arange(len(s.owner))]


def all_for_one(s: Signals, statistic: np.ndarray) -> np.ndarray:
    """FedMIA's per-round test: Φ((t_owner − μ_others) / σ_others) for every round and candidate, where
    ``statistic[r, c, x]`` is client c's statistic for x (higher = member-like) and μ, σ (population,
    + 1e-8 under the root, as the reference code) are fitted to the clients other than x's owner."""
    from scipy.stats import norm

    return norm.cdf(_z(s, statistic))


def _z(s: Signals, statistic: np.ndarray) -> np.ndarray:
    """(t_owner − μ_others) / σ_others per round and candidate (see :func:`all_for_one`)."""
    _, clients, n = statistic.shape
    if clients < 3:
        raise ValueError(f"fedmia: {clients} clients; the non-member fit needs at least 2 other clients")
    others = np.ones((clients, n), dtype=bool)
    others[s.owner, np.arange(n)] = False  # the owner never enters its own reference distribution
    masked = np.where(others[None], statistic, np.nan)
    mu = np.nanmean(masked, axis=1)
    sd = np.sqrt(np.nanvar(masked, axis=1) + 1e-8)
    return (statistic[:, s.owner, np.arange(n)] - mu) / sd


def _averaged(s: Signals, statistic: np.ndarray) -> np.ndarray:
    """Φ averaged over rounds; ties (Φ saturates at 1 in float64 beyond z ≈ 8.3) broken by the mean z,
    at a weight of 1e-12 per unit of z: it reorders only means of Φ closer than that."""
    from scipy.stats import norm

    z = _z(s, statistic)
    return np.nanmean(norm.cdf(z), axis=0) + 1e-12 * np.nanmean(z, axis=0)


def fedmia(s: Signals) -> np.ndarray:
    """FedMIA-II: the cosine statistic, Φ averaged over rounds."""
    return _averaged(s, s.cosine)


def fedmia_loss(s: Signals) -> np.ndarray:
    """FedMIA-I: the negated loss under each client's local model, Φ averaged over rounds."""
    return _averaged(s, -s.client_loss)


def _at(signals: Signals, values: np.ndarray, round: int) -> np.ndarray:
    """Round ``round``'s value of each candidate (NaN where its client was not sampled that round)."""
    return values[signals.row(round)]


LI = "Li et al., ICLR 2023"

ATTACKS: dict[str, MembershipAttack] = {a.name: a for a in (
    MembershipAttack("fedmia", lambda s, r: fedmia(s), SERVER, "Zhu et al., FedMIA, CVPR 2025 (FedMIA-II)"),
    MembershipAttack("fedmia-loss", lambda s, r: fedmia_loss(s), SERVER,
                     "Zhu et al., FedMIA, CVPR 2025 (FedMIA-I)"),
    MembershipAttack("fedmia-round", lambda s, r: _at(s, all_for_one(s, s.cosine), r), SERVER,
                     "Zhu et al., FedMIA, CVPR 2025 (FedMIA-II's test on one round)", True),
    MembershipAttack("loss", lambda s, r: -_at(s, s.local_loss, r), SERVER, "Yeom et al., CSF 2018", True),
    MembershipAttack("loss-series", lambda s, r: -np.nanmean(s.local_loss, axis=0), SERVER,
                     "Zhu et al., FedMIA, CVPR 2025 (Loss-Series baseline)"),
    MembershipAttack("gradient-cosine", lambda s, r: _at(s, owner_cosine(s), r), SERVER, LI,
                     True),
    MembershipAttack("gradient-diff", lambda s, r: _at(s, s.owner_diff, r), SERVER,
                     LI, True),
    MembershipAttack("cosine-series", lambda s, r: np.nanmean(owner_cosine(s), axis=0), SERVER,
                     "Zhu et al., FedMIA, CVPR 2025 (Avg-Cosine baseline)"),
    MembershipAttack("global-loss", lambda s, r: -_at(s, s.global_loss, r), GLOBAL, "Yeom et al., CSF 2018",
                     True),
    MembershipAttack("global-loss-series", lambda s, r: -s.global_loss.mean(axis=0), GLOBAL,
                     "Zhu et al., FedMIA, CVPR 2025 (Loss-Series, on global models)"),
    MembershipAttack("global-cosine", lambda s, r: s.global_cosine.mean(axis=0), GLOBAL,
                     "Li et al., ICLR 2023 (cosine with the global step, over rounds)"),
    MembershipAttack("gradient-norm", lambda s, r: -_at(s, s.gradient_norm, r), GLOBAL, LI,
                     True),
)}  # fmt: skip


def cells(rounds: Sequence[int], *, secure_aggregation: bool) -> list[tuple[str, MembershipAttack, int]]:
    """The attack cells of a row: (name, attack, round) — an attack of one round at each of
    ``rounds`` (``loss@0``), an attack over every round once (``fedmia``); under secure aggregation only
    the global-view attacks (the server never sees one client's update)."""
    found = []
    for attack in ATTACKS.values():
        if secure_aggregation and not attack.global_view:
            continue
        if attack.per_round:
            found += [(f"{attack.name}@{r}", attack, r) for r in rounds]
        else:
            found.append((attack.name, attack, -1))
    return found


def attack_of(cell: str) -> MembershipAttack:
    """The attack a cell name (``loss@0``, ``fedmia``) runs."""
    return ATTACKS[cell.split("@", 1)[0]]
