"""DP-SGD on the client (Abadi et al., *Deep Learning with Differential Privacy*, CCS 2016; in FL as
DP-Gaussian in DCS² Table 1).

Every local minibatch gradient is replaced by ``(Σ_b clip_C(g_b) + N(0, σ²C²·I)) / B``: per-sample
gradients (``torch.func.vmap`` of ``grad``, the same computation Opacus's functorch path does) clipped
to global norm C, summed, noised and averaged. Privacy is accounted with Opacus's RDP accountant per
client: σ, sampling rate q = B / (client dataset size) and the client's number of local steps over all
rounds it took part in, reported as ε at the configured δ. Opacus's accountant assumes Poisson sampling
of the minibatches; leakshield's clients draw shuffled minibatches of fixed size, the usual approximation
(Opacus makes it too when its Poisson sampling is off).

BatchNorm mixes the samples of a batch, so per-sample gradients are undefined: the model stage replaces
it by GroupNorm with Opacus's ``ModuleValidator.fix`` (so a DP-SGD row trains a slightly different
network; its utility row reflects that).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping

import pydantic
import torch
from torch import nn

from leakshield.defenses.base import DEFENSES, ClientContext, Defense, Participation
from leakshield.gradients import per_sample_gradients
from leakshield.registry import Params

#: the largest noise multiplier σ taken (Opacus's own search stops at 10⁶: beyond it ε is 0 in every
#: digit a table shows, and σ·C soon overflows the float32 the noise is added in)
MAX_NOISE_MULTIPLIER = 1e6
#: the largest noise standard deviation σ·C (or σ·S) a float32 update can hold without overflowing
MAX_NOISE_STD = 1e30


def check_finite_noise(noise_multiplier: float, clip: float) -> None:
    """A ValueError where the noise std σ·C would overflow the float32 update it is added to."""
    if noise_multiplier * clip > MAX_NOISE_STD:
        raise ValueError(
            f"noise std σ·C = {noise_multiplier:g}·{clip:g} overflows the float32 update it is added to "
            f"(at most {MAX_NOISE_STD:g}); lower noise_multiplier or clip"
        )


class DPSGDParams(Params):
    """noise_multiplier: σ (noise std = σ·C). clip: C, the per-sample gradient norm bound. delta: the δ at
    which ε is reported. target_epsilon with target_steps: instead of σ, the ε a client may spend over
    ``target_steps`` local steps (all rounds together); each client's σ is then the smallest that keeps
    it within that budget at its sampling rate (Opacus's ``get_noise_multiplier``, RDP accountant), and
    the utility row reports ``epsilon_target`` next to the ε actually spent."""

    noise_multiplier: float = pydantic.Field(default=1.1, ge=0, le=MAX_NOISE_MULTIPLIER)
    clip: float = pydantic.Field(default=1.0, gt=0)
    delta: float = pydantic.Field(default=1e-5, gt=0, lt=1)
    target_epsilon: float | None = pydantic.Field(default=None, gt=0)
    target_steps: int | None = pydantic.Field(default=None, ge=1)

    @pydantic.model_validator(mode="after")
    def _finite_noise(self) -> DPSGDParams:
        check_finite_noise(self.noise_multiplier, self.clip)
        return self

    @pydantic.model_validator(mode="after")
    def _target_needs_steps(self) -> DPSGDParams:
        if (self.target_epsilon is None) != (self.target_steps is None):
            raise ValueError(
                "target_epsilon and target_steps go together (the budget and the steps it covers)"
            )
        return self

    def sigma(self, sample_rate: float) -> float:
        """σ of a client sampling minibatches at ``sample_rate``."""
        if self.target_epsilon is None or self.target_steps is None:
            return self.noise_multiplier
        return noise_for_budget(self.target_epsilon, self.delta, round(sample_rate, 12), self.target_steps)


@functools.lru_cache(maxsize=256)
def noise_for_budget(epsilon: float, delta: float, sample_rate: float, steps: int) -> float:
    """The σ that spends ``epsilon`` at ``delta`` in ``steps`` subsampled Gaussian steps (Opacus, RDP)."""
    from opacus.accountants.utils import get_noise_multiplier

    return float(get_noise_multiplier(target_epsilon=epsilon, target_delta=delta, sample_rate=sample_rate,
                                      steps=steps, accountant="rdp"))  # fmt: skip


def dp_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float) -> float:
    """ε of ``steps`` subsampled Gaussian steps (RDP accountant of Opacus, Mironov et al. 2019)."""
    if steps == 0:
        return 0.0
    if noise_multiplier == 0:
        return float("inf")
    if not math.isfinite(noise_multiplier) or not 0 < sample_rate <= 1 or not 0 < delta < 1:
        # Opacus's accountant never returns for an infinite σ: refuse what has no meaning instead
        raise ValueError(
            f"dp_epsilon: noise multiplier {noise_multiplier} (finite), sample rate {sample_rate} (0, 1], "
            f"δ {delta} (0, 1)"
        )
    from opacus.accountants import RDPAccountant

    accountant = RDPAccountant()
    accountant.history = [(noise_multiplier, sample_rate, steps)]
    return float(accountant.get_epsilon(delta=delta))


@DEFENSES.register(
    "dp-sgd",
    summary="per-sample clipping + Gaussian noise in local training, ε from Opacus's RDP accountant "
    "[σ 1.1, C 1.0, δ 1e-5]; BatchNorm → GroupNorm",
    reference="Abadi et al., CCS 2016; DCS² Table 1 (DP-Gaussian); Opacus (Yousefpour et al., 2021)",
    params=DPSGDParams,
    aliases={"dpsgd": {}},
)
class DPSGD(Defense):
    """Gradient stage: the DP-SGD minibatch gradient; model stage: BatchNorm replaced by GroupNorm."""

    params: DPSGDParams

    def model_hook(self, model: nn.Module) -> nn.Module:
        if not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
            return model
        from opacus.validators import ModuleValidator

        return ModuleValidator.fix(model)

    replaces_gradient = True

    def check_sampling(self, rate: float) -> None:
        """A ``target_epsilon`` no σ up to 10⁶ meets at ``rate``, or whose σ·C overflows, is refused."""
        p = self.params
        try:
            check_finite_noise(p.sigma(rate), p.clip)
        except ValueError as exc:
            raise ValueError(
                f"target_epsilon {p.target_epsilon:g} over {p.target_steps} steps cannot be met at a "
                f"sampling rate {rate:.3g} ({' '.join(str(exc).split())}); raise target_epsilon or lower "
                "target_steps"
            ) from None

    def gradient(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, context: ClientContext
    ) -> dict[str, torch.Tensor]:
        p = self.params
        sigma = p.sigma(min(1.0, len(x) / max(len(context.dataset), 1)))
        samples = per_sample_gradients(model, x, y)
        norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(dim=1) for g in samples.values()))  # type: ignore[arg-type]
        factor = (p.clip / (norms + 1e-6)).clamp(max=1.0)
        out = {}
        for k, g in samples.items():
            total = torch.einsum("b,b...->...", factor, g)
            noise = torch.randn(total.shape, device=total.device, dtype=total.dtype) * (sigma * p.clip)
            out[k] = (total + noise) / len(x)
        return out

    def privacy_spent(
        self, client_steps: Mapping[int, tuple[int, float]], participation: Participation | None = None
    ) -> dict[str, float]:
        """ε per client from (local steps over all rounds, sampling rate); reports the largest."""
        p = self.params
        eps = [dp_epsilon(p.sigma(q), q, steps, p.delta) for steps, q in client_steps.values()]
        spent = {"epsilon": max(eps, default=0.0), "delta": p.delta}
        if p.target_epsilon is not None:
            spent["epsilon_target"] = p.target_epsilon
        return spent
