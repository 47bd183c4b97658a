"""PRECODE: a variational bottleneck inserted into the model (Scheliga, Mäder and Seeland, *PRECODE – A
Generic Model Extension to Prevent Deep Gradient Leakage*, WACV 2022, Sec. 3.2, Eq. 3).

The bottleneck encodes its input z into a Gaussian N(μ, σ) over K latent units, samples b = μ + σ·ε on
every forward (in eval mode too: the randomness is the defense) and decodes b back to the width of z.
The KL divergence of N(μ, σ) to N(0, I), weighted by β, is added to the loss the client trains on and
whose gradient it shares (Eq. 3). An attacker who does not know ε cannot reproduce the shared gradient of
any candidate input, which is what breaks optimization attacks; fully connected layers *before* the
bottleneck still leak their input analytically (Balunović et al., ICLR 2022) — see the adaptive attack
``precode-analytic``.
"""

from __future__ import annotations

import math
from typing import Literal

import pydantic
import torch
import torch.nn.functional as F
from torch import nn

from leakshield.defenses.base import DEFENSES, Defense
from leakshield.errors import ConfigError
from leakshield.registry import Params


class PrecodeParams(Params):
    """k: latent units K of the bottleneck (the encoder has 2K outputs: μ and the pre-softplus σ).
    beta: weight β of the KL term (Eq. 3). position: ``classifier`` puts the bottleneck right before the
    classifier, on the flattened features (the paper's placement); any other value names a module of the
    model (as in ``named_modules``, e.g. ``features.2``) after whose output it is put (Appendix D studies
    placements). kl_units: ``bits`` divides the KL by ln 2 as the reference code does (the defaults K,
    β were tuned with it); ``nats`` is the plain KL of the paper's Eq. 3."""

    k: int = pydantic.Field(default=256, ge=1)
    beta: float = pydantic.Field(default=1e-3, ge=0)
    position: str = "classifier"
    kl_units: Literal["bits", "nats"] = "bits"


def gaussian_kl(mu: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """KL(N(μ, diag σ²) ‖ N(0, I)) per sample in nats: Σ_k −½(1 + 2 log σ_k − μ_k² − σ_k²)."""
    log_sigma = torch.log(sigma.clamp_min(1e-12))
    return (-0.5 * (1 + 2 * log_sigma - mu.pow(2) - sigma.pow(2))).sum(dim=-1)


class PrecodeBottleneck(nn.Module):
    """Variational bottleneck layer: ``Linear(d, 2K)`` → (μ, softplus → σ) → b = μ + σ·ε →
    ``Linear(K, d)``, reshaped to the input's shape so that it is a drop-in layer.

    ``stochastic`` marks the layer for attacks and for the client's RNG handling (ε comes from torch's
    global RNG, which the client seeds per local step). After each forward the layer holds β·KL (batch
    mean, Eq. 3) until :meth:`pop_auxiliary_loss` takes it; ``last_mu`` and ``last_sigma`` keep the latest
    statistics (detached) for inspection. Parameters: ``features`` d, ``k`` K, ``beta`` β, ``kl_units``.
    """

    stochastic = True

    def __init__(self, features: int, k: int = 256, beta: float = 1e-3, kl_units: str = "bits") -> None:
        super().__init__()
        if kl_units not in ("bits", "nats"):
            raise ValueError(f"kl_units: {kl_units!r}; allowed: bits, nats")
        self.features, self.k, self.beta, self.kl_units = features, k, beta, kl_units
        self.encoder = nn.Linear(features, 2 * k)
        self.decoder = nn.Linear(k, features)
        self._auxiliary: torch.Tensor | None = None
        self.last_mu: torch.Tensor | None = None
        self.last_sigma: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.flatten(1)
        if h.shape[1] != self.features:
            raise ValueError(f"PRECODE bottleneck built for {self.features} features, got {h.shape[1]}")
        stats = self.encoder(h)
        mu, sigma = stats[:, : self.k], F.softplus(stats[:, self.k :])
        sample = mu + sigma * torch.randn_like(sigma)
        kl = gaussian_kl(mu, sigma).mean()
        if self.kl_units == "bits":
            kl = kl / math.log(2)
        self._auxiliary = self.beta * kl
        self.last_mu, self.last_sigma = mu.detach(), sigma.detach()
        return self.decoder(sample).view_as(x)

    def pop_auxiliary_loss(self) -> torch.Tensor | None:
        """β·KL of the latest forward, once (see :func:`leakshield.models.base.auxiliary_loss`)."""
        term, self._auxiliary = self._auxiliary, None
        return term

    def __getstate__(self) -> dict:
        # a pending loss term holds an autograd graph (not deep-copyable): copies start without one
        state = dict(super().__getstate__())
        state["_auxiliary"] = None
        state["last_mu"] = state["last_sigma"] = None
        return state

    def extra_repr(self) -> str:
        return f"features={self.features}, k={self.k}, beta={self.beta}, kl_units={self.kl_units}"


def insert_bottleneck(model: nn.Module, params: PrecodeParams) -> nn.Module:
    """Put a :class:`PrecodeBottleneck` into ``model`` at ``params.position`` (in place; returned)."""
    if params.position == "classifier":
        classifier = getattr(model, "classifier", None)
        if not isinstance(classifier, nn.Module):
            raise ConfigError("precode: position 'classifier' but the model has no 'classifier' module")
        linear = next((m for m in classifier.modules() if isinstance(m, nn.Linear)), None)
        if linear is None:
            raise ConfigError("precode: the model's classifier contains no nn.Linear to read the width from")
        bottleneck = PrecodeBottleneck(linear.in_features, params.k, params.beta, params.kl_units)
        model.classifier = nn.Sequential(bottleneck, classifier)
        return model
    modules = dict(model.named_modules())
    if params.position not in modules or params.position == "":
        allowed = ", ".join(["classifier", *[n for n in modules if n][:12]])
        raise ConfigError(f"precode.position: no module {params.position!r}; allowed e.g.: {allowed}, …")
    width = _output_width(model, modules[params.position])
    parent_name, _, child = params.position.rpartition(".")
    parent = modules[parent_name] if parent_name else model
    bottleneck = PrecodeBottleneck(width, params.k, params.beta, params.kl_units)
    setattr(parent, child, nn.Sequential(getattr(parent, child), bottleneck))
    return model


def _output_width(model: nn.Module, module: nn.Module) -> int:
    """Flattened output width of ``module`` for one input of the model (a probe forward)."""
    if isinstance(module, nn.Linear):
        return module.out_features
    shape = getattr(model, "input_shape", None)
    if shape is None:
        raise ConfigError(
            "precode.position: the width after a non-Linear module needs the model's input_shape "
            "(models from create_model have it)"
        )
    seen: list[int] = []
    handle = module.register_forward_hook(lambda _m, _i, out: seen.append(out[0].numel()))
    try:
        with torch.no_grad():
            was_training = model.training
            model.eval()
            model(torch.zeros(1, *shape, device=next(model.parameters()).device))
            model.train(was_training)
    finally:
        handle.remove()
    return seen[0]


@DEFENSES.register(
    "precode",
    summary="variational bottleneck before the classifier, sampled on every forward; CE + β·KL "
    "[K 256, β 1e-3]",
    reference="Scheliga et al., PRECODE, WACV 2022 (Sec. 3.2, Eq. 3)",
    params=PrecodeParams,
)
class Precode(Defense):
    """Model stage: inserts :class:`PrecodeBottleneck` (public: the server builds the model with it);
    its KL term enters every loss differentiated on the model (training and the shared gradient). Adaptive
    attacks: ``precode-analytic`` (a fully connected layer before the bottleneck leaks its input) and
    ``precode-expectation`` (IG on the mean dummy gradient over bottleneck samples)."""

    params: PrecodeParams

    def model_hook(self, model: nn.Module) -> nn.Module:
        return insert_bottleneck(model, self.params)
