"""Defenses plug into the client pipeline at four stages (DESIGN.md "one pipeline, many stages").

=============  ==========================================================  ==========================
stage          what it does                                                examples
=============  ==========================================================  ==========================
model_hook     changes the model the server builds and sends (public)       PRECODE, dropout, DP-SGD
data_hook      transforms a local minibatch before the loss                 MixUp, InstaHide, ATS
compute_grad   replaces how a minibatch gradient is computed                DP-SGD, Soteria, DCS²
release_hook   transforms the update before it leaves the client            noise, clipping, pruning
=============  ==========================================================  ==========================

Every stage is the identity by default; a defense overrides the ones it needs. ``fit`` runs once per
experiment cell before FL training, for defenses that need one-off preparation (a public model, a
policy search). A defense's ``public_config`` is what an adaptive attack may read (Kerckhoffs); secrets
(seeds, masks, drawn coefficients) never leave the defense.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from leakshield.data.types import DatasetSplits, ImageSet
from leakshield.registry import Params, Registry

GradientFn = Callable[[nn.Module, torch.Tensor, torch.Tensor], dict[str, torch.Tensor]]


@dataclass(frozen=True)
class FitContext:
    """What ``Defense.fit`` may use: the dataset splits (public split included) and the device."""

    data: DatasetSplits
    device: torch.device
    seed: int


class Defense:
    """Base class of every defense; see the module docstring for the stages."""

    name: str = "defense"

    def __init__(self, params: Params) -> None:
        self.params = params

    def fit(self, context: FitContext) -> None:
        """One-off preparation; the default needs none."""

    def model_hook(self, model: nn.Module) -> nn.Module:
        return model

    def data_hook(
        self, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return x, y

    def compute_gradient(self) -> GradientFn | None:
        """A replacement for the plain minibatch gradient, or None to keep it."""
        return None

    def release_hook(
        self, update: dict[str, torch.Tensor], generator: torch.Generator
    ) -> dict[str, torch.Tensor]:
        return update

    def bind_local_data(self, data: ImageSet) -> None:
        """Called by the client before it computes an update with its local dataset (mixing defenses draw
        partners from it); the default ignores it."""

    def bind_batch(self, batch: ImageSet) -> None:
        """Called by the client with each minibatch (pixels, labels, flags) right before its gradient is
        computed (DCS² finds the sensitive samples in it); the default ignores it."""

    def sensitive_mask(self, batch: ImageSet) -> torch.Tensor | None:
        """Which of a client's samples the defense treats as sensitive (None: the notion does not apply);
        the report's accuracy on sensitive samples uses it."""
        return None

    def privacy_spent(self, client_steps: Mapping[int, tuple[int, float]]) -> dict[str, float]:
        """Formal privacy spent after training, from each client's (local steps, sampling rate); empty
        for defenses without a guarantee (DP-SGD reports ε)."""
        return {}

    def public_config(self) -> dict[str, Any]:
        """The defense's name and parameters: everything an adaptive attack may know."""
        return {"name": self.name, **self.params.model_dump()}


DEFENSES: Registry[Defense] = Registry("defense")


class DefensePipeline:
    """Defenses applied in the order given at every stage (e.g. MixUp then Gaussian noise)."""

    def __init__(self, defenses: Sequence[Defense] = ()) -> None:
        self.defenses = list(defenses)
        overriding = [d.name for d in self.defenses if d.compute_gradient() is not None]
        if len(overriding) > 1:
            raise ValueError(
                f"defenses {', '.join(overriding)} each replace the gradient computation; stack at most one"
            )

    @classmethod
    def from_config(cls, entries: Sequence[Mapping[str, Any]]) -> DefensePipeline:
        """Build from ``[{"name": ..., "params": {...}}, ...]``."""
        return cls([create_defense(e["name"], e.get("params")) for e in entries])

    def fit(self, context: FitContext) -> None:
        for defense in self.defenses:
            defense.fit(context)

    def model_hook(self, model: nn.Module, seed: int = 0) -> nn.Module:
        """Every defense's model stage in order; layers they add are initialized from torch's global RNG
        seeded with ``seed`` (restored after), so the same model and seed give the same network."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for defense in self.defenses:
                model = defense.model_hook(model)
        return model

    def data_hook(
        self, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        for defense in self.defenses:
            x, y = defense.data_hook(x, y, generator)
        return x, y

    def compute_gradient(self) -> GradientFn | None:
        for defense in self.defenses:
            fn = defense.compute_gradient()
            if fn is not None:
                return fn
        return None

    def release_hook(
        self, update: dict[str, torch.Tensor], generator: torch.Generator
    ) -> dict[str, torch.Tensor]:
        for defense in self.defenses:
            update = defense.release_hook(update, generator)
        return update

    def bind_local_data(self, data: ImageSet) -> None:
        for defense in self.defenses:
            defense.bind_local_data(data)

    def bind_batch(self, batch: ImageSet) -> None:
        for defense in self.defenses:
            defense.bind_batch(batch)

    def sensitive_mask(self, data: ImageSet) -> torch.Tensor | None:
        """The first defense's answer that is not None (binding ``data`` as the client's dataset)."""
        for defense in self.defenses:
            defense.bind_local_data(data)
            mask = defense.sensitive_mask(data)
            if mask is not None:
                return mask
        return None

    def privacy_spent(self, client_steps: Mapping[int, tuple[int, float]]) -> dict[str, float]:
        spent: dict[str, float] = {}
        for defense in self.defenses:
            spent.update(defense.privacy_spent(client_steps))
        return spent

    def public_config(self) -> tuple[dict[str, Any], ...]:
        return tuple(d.public_config() for d in self.defenses)


def create_defense(name: str, params: Mapping[str, Any] | None = None) -> Defense:
    """Build a registered defense with validated parameters."""
    defense = DEFENSES.create(name, params)
    defense.name = DEFENSES.get(name).name
    return defense
