"""Additive noise on the released update, or at ``stage: step`` on every local gradient: the
gradient-perturbation baseline of DLG, Soteria, PRECODE, ATS and DCS² (Gaussian) and its Laplacian
variant (Zhu et al., NeurIPS 2019, Sec. 5)."""

from __future__ import annotations

import pydantic
import torch

from leakshield.defenses.base import DEFENSES, ClientContext
from leakshield.defenses.perturbation_stage import StagedPerturbation, StageParams


class GaussianNoiseParams(StageParams):
    """sigma: standard deviation of the noise added to every entry of the update (papers sweep
    1e-4, 1e-3, 1e-2, 1e-1). stage: ``release`` (the update) or ``step`` (every minibatch gradient)."""

    sigma: float = pydantic.Field(default=1e-3, ge=0)


class LaplacianNoiseParams(StageParams):
    """scale: scale b of the Laplace(0, b) noise added to every entry (std = √2·b). stage: ``release``
    or ``step``."""

    scale: float = pydantic.Field(default=1e-3, ge=0)


def standard_noise(like: torch.Tensor, generator: torch.Generator, kind: str) -> torch.Tensor:
    """Unit noise shaped like ``like``, drawn from ``generator`` (reproducible per client and round)."""
    if kind == "gaussian":
        noise = torch.randn(like.shape, generator=generator, device=generator.device)
    else:  # Laplace(0, 1) by inverse CDF of U(-1/2, 1/2)
        u = torch.rand(like.shape, generator=generator, device=generator.device) - 0.5
        noise = -torch.sign(u) * torch.log1p(-2 * u.abs().clamp(max=0.5 - 1e-7))
    return noise.to(device=like.device, dtype=like.dtype)


class AdditiveNoise(StagedPerturbation):
    """``Δ + scale·ε`` with unit noise ε of ``kind`` drawn per client and round (and step, at ``stage:
    step``)."""

    kind: str

    @property
    def scale(self) -> float:
        raise NotImplementedError

    def perturb(self, update: dict[str, torch.Tensor], context: ClientContext) -> dict[str, torch.Tensor]:
        s = self.scale
        return {k: v + s * standard_noise(v, context.generator, self.kind) for k, v in update.items()}


@DEFENSES.register(
    "gaussian-noise",
    summary="adds N(0, σ²) to every entry of the released update [σ 1e-3]",
    reference="Zhu et al., Deep Leakage from Gradients, NeurIPS 2019, Sec. 5; PRECODE Table 2; DCS² Table 1",
    params=GaussianNoiseParams,
    aliases={"noise": {}},
)
class GaussianNoise(AdditiveNoise):
    """``Δ + σ·ε``, ε ~ N(0, I) drawn per client and round (per step at ``stage: step``)."""

    params: GaussianNoiseParams
    kind = "gaussian"

    @property
    def scale(self) -> float:
        return self.params.sigma


@DEFENSES.register(
    "laplacian-noise",
    summary="adds Laplace(0, b) noise to every entry of the released update [b 1e-3]",
    reference="Zhu et al., Deep Leakage from Gradients, NeurIPS 2019, Sec. 5 (Laplacian noise)",
    params=LaplacianNoiseParams,
)
class LaplacianNoise(AdditiveNoise):
    """``Δ + b·ε``, ε ~ Laplace(0, 1) drawn per client and round (per step at ``stage: step``)."""

    params: LaplacianNoiseParams
    kind = "laplacian"

    @property
    def scale(self) -> float:
        return self.params.scale
