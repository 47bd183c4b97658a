"""What every text attack shares: its input (what the observing server holds) and output, the base
class, the registry, the defenses a text grid may run, and the threat an attack runs under with its
parameters."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pydantic
import torch

from leakshield.artifacts import ArtifactCache
from leakshield.defenses import DEFENSES
from leakshield.errors import ConfigError
from leakshield.registry import Params, Registry
from leakshield.text.models import TextClassifier
from leakshield.threats import Knowledge, Threat

#: the defenses a text grid may run: they act on the gradient or the update, never on pixels
TEXT_DEFENSES = (
    "none",
    "gaussian-noise",
    "laplacian-noise",
    "clipping",
    "pruning",
    "quantization",
    "dp-sgd",
    "row-guard",
    "drift-guard",
    "loss-guard",
    "dominance-guard",
)


@dataclass(frozen=True)
class TextAttackInput:
    """``gradient``: parameter name → the batch's mean loss gradient (or its FedAvg estimate);
    ``labels``: the batch's labels where the threat grants them (None otherwise); ``noise_std``: the
    known Gaussian noise's standard deviation on ``gradient`` (None: no noise); ``public``: the server's
    public token ids (a language prior is fitted on them) and ``cache``, where such fits are kept."""

    model: TextClassifier
    gradient: Mapping[str, torch.Tensor]
    batch: int
    labels: torch.Tensor | None
    noise_std: float | None
    seed: int
    public: torch.Tensor | None = None
    cache: ArtifactCache | None = None
    #: the relative rounding of the released values the defense is known to apply (fp16: 2⁻¹¹; None:
    #: none), :func:`~leakshield.text_grid.known.known_rounding`
    rounding: float | None = None


@dataclass(frozen=True)
class TextAttackOutput:
    """``ids``: reconstructed sequences (batch × length, framed by ``[CLS]`` and ``[SEP]``), None for an
    attack that recovers no order; ``bag``: the token ids it found in the batch (None: not an output)."""

    ids: torch.Tensor | None = None
    bag: torch.Tensor | None = None


class TextAttack:
    """Base class: ``__call__`` reconstructs from a :class:`TextAttackInput`; ``needs_labels``: whether
    it uses the true labels beyond a batch of one; ``recovers_set``: whether its output is a bag of
    tokens. :meth:`prepare` gives the model the server sends: an attack whose declared threat changes
    the model overrides it; the others send the honest model."""

    needs_labels = False
    #: whether it recovers a set of tokens (scored as a bag) rather than sequences
    recovers_set = False

    def __init__(self, params: Params) -> None:
        self.params = params

    def prepare(self, model: TextClassifier, public: torch.Tensor, seed: int) -> TextClassifier:
        """The model the server sends from the honest ``model`` (``public``: its public token ids)."""
        return model

    def __call__(self, given: TextAttackInput) -> TextAttackOutput:
        raise NotImplementedError


TEXT_ATTACKS: Registry[TextAttack] = Registry("text attack", requires_threat=True)


class KnownLabels(Params):
    """labels_known: use the batch's true labels beyond a batch of one (a batch of one leaks its label
    through the head's bias gradient)."""

    labels_known: bool = pydantic.Field(
        default=True, description="use the true labels beyond a batch of one (one label always leaks)"
    )


def create_text_attack(name: str, params: Mapping[str, Any] | None = None) -> TextAttack:
    return TEXT_ATTACKS.create(name, params)


def threat_of(name: str, params: Mapping[str, Any]) -> Threat:
    """The threat model a text attack runs under with ``params`` (TAG without known labels needs none)."""
    threat = TEXT_ATTACKS.get(name).threat
    validated = TEXT_ATTACKS.validate(name, params)
    if getattr(validated, "labels_known", None) is False:
        return dataclasses.replace(threat, knowledge=threat.knowledge - {Knowledge.LABELS})
    return threat


def check_text_defense(name: str, where: str) -> None:
    """Refuse, in one line, a defense that transforms images or the image model."""
    if DEFENSES.get(name).name not in TEXT_DEFENSES:
        raise ConfigError(
            f"{where}: {name} transforms images or the image model; the text track takes "
            f"{', '.join(TEXT_DEFENSES)}"
        )
