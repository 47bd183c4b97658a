"""Clipping a client's update, fixed or adaptive.

Adaptive clipping is Andrew, Thakkar, McMahan & Ramaswamy, *Differentially Private Learning with
Adaptive Clipping* (NeurIPS 2021), Algorithm 1: each sampled client also reports the bit
b_k = 1[‖Δ_k‖ ≤ C], centred as b_k − ½ so that one client moves the sum by ½ at most; the server forms
b̃ = (Σ (b_k − ½) + N(0, σ_b²)) / m̄ + ½ (m̄ the expected clients per round) and moves the bound
geometrically toward the target quantile γ of the update norms, C ← C·exp(−η_C·(b̃ − γ)) (their
Eq. 3). The bits cost privacy too: one client's contribution to (Σ clipped Δ / z_Δ·C, Σ (b − ½) / σ_b)
has norm at most (z_Δ⁻² + (2σ_b)⁻²)^½, so to spend what one Gaussian mechanism of multiplier z spends the
updates get z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2) (their Theorem 1). Their defaults: γ = 0.5, η_C = 0.2,
σ_b = m̄/20. The count is released every round, an empty one too.

Flower 1.41's adaptive-clipping wrappers differ (``tests/test_cross_device_flower.py``): their bit
marks a *clipped* update under the same update rule, so the bound runs away from γ; they noise the
uncentred count with the ½-sensitivity split; and they compute the noise from the bound after its
update, so updates clipped at C get noise for the new C.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from leakshield.errors import ConfigError


def update_norms(updates: dict[str, torch.Tensor]) -> torch.Tensor:
    """Each client's global L2 norm over every tensor (the leading dimension is the client)."""
    return torch.sqrt(sum(u.flatten(1).pow(2).sum(1) for u in updates.values()))  # type: ignore[arg-type]


def clip_updates(
    updates: dict[str, torch.Tensor], bound: float, norms: torch.Tensor | None = None
) -> dict[str, torch.Tensor]:
    """Δ_k·min(1, S/‖Δ_k‖) for every client k; ``norms``: the updates' norms where already computed."""
    norms = update_norms(updates) if norms is None else norms
    scale = (bound / norms.clamp(min=1e-12)).clamp(max=1.0)
    return {name: u * scale.view(-1, *([1] * (u.dim() - 1))) for name, u in updates.items()}


def update_noise_multiplier(noise_multiplier: float, count_stddev: float) -> float:
    """z_Δ of Andrew et al.'s Theorem 1: what is left for the updates when the clipped-count release
    of noise σ_b shares a total budget of multiplier z."""
    if noise_multiplier == 0:
        return 0.0
    if 2 * count_stddev <= noise_multiplier:
        raise ConfigError(
            f"dp.count_stddev {count_stddev}: adaptive clipping needs 2·σ_b above the noise multiplier "
            f"{noise_multiplier} (their Theorem 1); raise count_stddev or lower the noise multiplier"
        )
    return (noise_multiplier**-2 - (2 * count_stddev) ** -2) ** -0.5


@dataclass
class AdaptiveClip:
    """The clipping bound C and its quantile update (module docstring)."""

    bound: float
    target_quantile: float = 0.5
    learning_rate: float = 0.2
    count_stddev: float = 0.0

    def step(self, norms: torch.Tensor, expected_clients: float, generator: torch.Generator) -> float:
        """Update C from the sampled clients' update norms (before clipping; none in an empty round);
        returns the new C."""
        count = centred_count(norms, self.bound)
        if self.count_stddev > 0:
            count += self.count_stddev * float(torch.randn((), generator=generator, dtype=torch.float64))
        fraction = count / expected_clients + 0.5
        self.bound *= math.exp(-self.learning_rate * (fraction - self.target_quantile))
        return self.bound


def centred_count(norms: torch.Tensor, bound: float) -> float:
    """Σ_k (1[‖Δ_k‖ ≤ C] − ½): one client more or less moves it by ½."""
    return float((norms <= bound).double().sum()) - 0.5 * len(norms)
