"""The dropout defense: dropout layers that stay active when the client computes its update, so the
shared gradient depends on a secret random mask (evaluated as a baseline by PRECODE, Scheliga et al.,
WACV 2022, and Balunović et al., ICLR 2022, with one layer before the classifier; by Anti-GAN, Luo &
Zhang, TKDD 2025, Sec. 5.3, after each layer)."""

from __future__ import annotations

from typing import Literal

import pydantic
import torch
import torch.nn.functional as F
from torch import nn

from leakshield.defenses.base import DEFENSES, Defense
from leakshield.errors import ConfigError
from leakshield.registry import Params

#: the activation modules after which ``placement: every-layer`` puts a dropout layer
ACTIVATIONS = (nn.ReLU, nn.LeakyReLU, nn.ELU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid)


class DropoutParams(Params):
    """p: probability of zeroing each feature (survivors scaled by 1/(1 − p)). placement: ``classifier``
    (one layer in front of the classifier, as PRECODE and Balunović et al. evaluate it) or
    ``every-layer`` (after every hidden layer's activation, Anti-GAN Sec. 5.3)."""

    p: float = pydantic.Field(default=0.5, gt=0, lt=1)
    placement: Literal["classifier", "every-layer"] = "classifier"


class ActiveDropout(nn.Module):
    """Dropout that samples a mask on every differentiated forward, in train and eval mode alike (a
    stochastic layer: the randomness is the defense), so every shared update and every attacker's dummy
    gradient sees a fresh mask. Plain inference (under ``torch.no_grad``, e.g. accuracy) uses the
    expectation, the identity, as ordinary dropout does at test time. ``stochastic`` marks the layer for
    attacks and the client's RNG handling."""

    stochastic = True

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p
        #: a fixed keep-mask (features,) used instead of random draws: set by an attacker who inferred
        #: the client's mask from the update (``dropout-mask``), never by the client
        self.fixed_mask: torch.Tensor | None = None
        #: the identity, as at test time: set by a participant on its own copy of the model (it controls
        #: that copy, e.g. the GAN attacker's discriminator), never on a client's training model
        self.inference = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.inference:
            return x
        if self.fixed_mask is not None and torch.is_grad_enabled():
            return x * self.fixed_mask.to(x.dtype) / (1 - self.p)
        return F.dropout(x, self.p, training=torch.is_grad_enabled())

    def extra_repr(self) -> str:
        return f"p={self.p}, active whenever gradients are computed"


@DEFENSES.register(
    "dropout",
    summary="inserts dropout before the classifier (or after every layer), active whenever a gradient "
    "is computed [p 0.5, placement classifier]",
    reference="Srivastava et al., JMLR 2014; as a leakage defense: PRECODE (WACV 2022), Balunović et al. "
    "(ICLR 2022)",
    params=DropoutParams,
)
class DropoutDefense(Defense):
    """Model stage: ``classifier`` becomes ``Sequential(ActiveDropout(p), classifier)``, or (``every-layer``)
    each activation module ``a`` becomes ``Sequential(a, ActiveDropout(p))``. The model the server builds
    contains the layers (they are public); each forward draws fresh secret masks. The adaptive attack
    ``dropout-expectation`` averages the dummy gradient over sampled masks."""

    params: DropoutParams

    def model_hook(self, model: nn.Module) -> nn.Module:
        if self.params.placement == "every-layer":
            return self._after_every_activation(model)
        classifier = getattr(model, "classifier", None)
        if not isinstance(classifier, nn.Module):
            raise ConfigError("dropout: the model has no 'classifier' module to put dropout in front of")
        model.classifier = nn.Sequential(ActiveDropout(self.params.p), classifier)
        return model

    def _after_every_activation(self, model: nn.Module) -> nn.Module:
        found = [name for name, m in model.named_modules() if isinstance(m, ACTIVATIONS)]
        if not found:
            raise ConfigError("dropout: placement every-layer needs activation modules (nn.ReLU, nn.Tanh, …)")
        for name in found:
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            setattr(parent, child, nn.Sequential(getattr(parent, child), ActiveDropout(self.params.p)))
        return model
