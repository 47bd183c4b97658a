"""The dropout defense: a dropout layer before the classifier that stays active when the client computes
its update, so the shared gradient depends on a secret random mask (evaluated as a baseline by PRECODE,
Scheliga et al., WACV 2022, and Balunović et al., ICLR 2022)."""

from __future__ import annotations

import pydantic
import torch
import torch.nn.functional as F
from torch import nn

from leakshield.defenses.base import DEFENSES, Defense
from leakshield.errors import ConfigError
from leakshield.registry import Params


class DropoutParams(Params):
    """p: probability of zeroing each feature entering the classifier (survivors scaled by 1/(1 − p))."""

    p: float = pydantic.Field(default=0.5, gt=0, lt=1)


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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fixed_mask is not None and torch.is_grad_enabled():
            return x * self.fixed_mask.to(x.dtype) / (1 - self.p)
        return F.dropout(x, self.p, training=torch.is_grad_enabled())

    def extra_repr(self) -> str:
        return f"p={self.p}, active whenever gradients are computed"


@DEFENSES.register(
    "dropout",
    summary="inserts dropout before the classifier, active whenever a gradient is computed [p 0.5]",
    reference="Srivastava et al., JMLR 2014; as a leakage defense: PRECODE (WACV 2022), Balunović et al. "
    "(ICLR 2022)",
    params=DropoutParams,
)
class DropoutDefense(Defense):
    """Model stage: ``classifier`` becomes ``Sequential(ActiveDropout(p), classifier)``. The model the
    server builds contains the layer (it is public); each forward draws a fresh secret mask. The adaptive
    attack ``dropout-expectation`` averages the dummy gradient over sampled masks."""

    params: DropoutParams

    def model_hook(self, model: nn.Module) -> nn.Module:
        classifier = getattr(model, "classifier", None)
        if not isinstance(classifier, nn.Module):
            raise ConfigError("dropout: the model has no 'classifier' module to put dropout in front of")
        model.classifier = nn.Sequential(ActiveDropout(self.params.p), classifier)
        return model
