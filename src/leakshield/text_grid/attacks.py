"""The text attacks a grid runs, registered with their parameters and declared threat models: the bag of
words (which words a batch holds, read off the input embedding's gradient) and TAG (Deng et al., EMNLP
Findings 2021: gradient matching on continuous embeddings, decoded to the nearest tokens).

Each attack gets a :class:`TextAttackInput`: what the observing server holds — the model it sent, the
client's gradient (FedSGD) or its estimate from a FedAvg update, −Δθ / (lr · local steps), the batch
size, and the standard deviation of the Gaussian noise its defenses add (their parameters are public,
Kerckhoffs), and, where the threat grants them, the labels."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pydantic
import torch

from leakshield.defenses import DEFENSES
from leakshield.errors import ConfigError, LeakshieldError
from leakshield.registry import Params, Registry
from leakshield.text.bag_of_words import bag_of_words, embedding_parameter
from leakshield.text.models import TextClassifier
from leakshield.text.tag import leaked_length, tag_attack
from leakshield.threats import Adversary, Knowledge, Threat

#: the defenses a text grid may run: they act on the gradient or the update, never on pixels
TEXT_DEFENSES = ("none", "gaussian-noise", "laplacian-noise", "clipping", "pruning", "quantization", "dp-sgd")


@dataclass(frozen=True)
class TextAttackInput:
    """``gradient``: parameter name → the batch's mean loss gradient (or its FedAvg estimate);
    ``labels``: the batch's labels where the threat grants them (None otherwise); ``noise_std``: the
    known Gaussian noise's standard deviation on ``gradient`` (None: no noise)."""

    model: TextClassifier
    gradient: Mapping[str, torch.Tensor]
    batch: int
    labels: torch.Tensor | None
    noise_std: float | None
    seed: int


@dataclass(frozen=True)
class TextAttackOutput:
    """``ids``: reconstructed sequences (batch × length, framed by ``[CLS]`` and ``[SEP]``), None for an
    attack that recovers no order; ``bag``: the token ids it found in the batch (None: not an output)."""

    ids: torch.Tensor | None = None
    bag: torch.Tensor | None = None


class TextAttack:
    """Base class: ``__call__`` reconstructs from a :class:`TextAttackInput`; ``needs_labels``: whether
    it uses the true labels beyond a batch of one."""

    needs_labels = False

    def __init__(self, params: Params) -> None:
        self.params = params

    def __call__(self, given: TextAttackInput) -> TextAttackOutput:
        raise NotImplementedError


TEXT_ATTACKS: Registry[TextAttack] = Registry("text attack", requires_threat=True)


class BagOfWordsParams(Params):
    """No parameters: the bag is the set of embedding rows with a gradient (under known noise, rows a
    χ² test at a 1 % family-wise false-row rate says noise alone does not explain)."""


@TEXT_ATTACKS.register(
    "bag-of-words",
    summary="the token ids whose input-embedding rows carry a gradient: exact for untied embeddings",
    reference="Melis et al., Exploiting Unintended Feature Leakage, S&P 2019; Gupta et al., Recovering "
    "Private Text in Federated Learning (FILM), NeurIPS 2022",
    params=BagOfWordsParams,
    threat=Threat(Adversary.OBSERVING_SERVER, frozenset({Knowledge.PROTOCOL, Knowledge.DEFENSES})),
)
class BagOfWordsAttack(TextAttack):
    """The batch's token set from the input embedding's gradient rows (``bag_of_words``)."""

    def __call__(self, given: TextAttackInput) -> TextAttackOutput:
        grad = given.gradient[embedding_parameter(given.model)]
        return TextAttackOutput(bag=bag_of_words(grad, noise_std=given.noise_std).cpu())


class TagParams(Params):
    """iterations: Adam steps on the dummy embeddings; lr: their step size; l1_scale: weight of TAG's L1
    term beside the L2 distance (breaching's 0.1); labels_known: use the batch's true labels beyond a
    batch of one (a batch of one leaks its label through the head's bias gradient)."""

    iterations: int = pydantic.Field(default=300, ge=1, description="Adam steps on the dummy embeddings")
    lr: float = pydantic.Field(default=0.01, gt=0, description="the steps' size (Adam)")
    l1_scale: float = pydantic.Field(default=0.1, ge=0, description="weight of the L1 term beside L2")
    labels_known: bool = pydantic.Field(
        default=True, description="use the true labels beyond a batch of one (one label always leaks)"
    )


@TEXT_ATTACKS.register(
    "tag",
    summary="TAG: gradient matching on word embeddings (L2 + weighted L1), nearest tokens [300 steps]",
    reference="Deng et al., TAG: Gradient Attack on Transformer-based Language Models, EMNLP Findings "
    "2021; its L2 + L1 distance as the breaching library implements it",
    params=TagParams,
    threat=Threat(
        Adversary.OBSERVING_SERVER,
        frozenset({Knowledge.PROTOCOL, Knowledge.DEFENSES, Knowledge.LABELS}),
    ),
)
class TagTextAttack(TextAttack):
    """TAG with the length read from the position embedding's gradient (the longest the model takes
    when the length read is under 3, or no position shows a gradient above the noise)."""

    needs_labels = True
    params: TagParams

    def __call__(self, given: TextAttackInput) -> TextAttackOutput:
        try:
            length = leaked_length(given.model, given.gradient, given.noise_std)
        except LeakshieldError:  # no position row stands above the noise
            length = 0
        length = length if length >= 3 else given.model.max_length
        labels = given.labels if given.batch > 1 and self.params.labels_known else None
        result = tag_attack(given.model, given.gradient, batch=given.batch, labels=labels,
                            iterations=self.params.iterations, lr=self.params.lr,
                            l1_scale=self.params.l1_scale, seed=given.seed, length=length)  # fmt: skip
        return TextAttackOutput(ids=result.ids)


def create_text_attack(name: str, params: Mapping[str, Any] | None = None) -> TextAttack:
    return TEXT_ATTACKS.create(name, params)


def known_noise_std(
    entries: Sequence[Mapping[str, Any]],
    step_sizes: Sequence[int],
    pool: int,
    lr: float | None = None,
) -> float | None:
    """The standard deviation of the Gaussian noise a defense stack leaves on each entry of the
    attacker's gradient estimate, from the defenses' public parameters, for local steps on minibatches
    of ``step_sizes`` drawn from a client holding ``pool`` texts: ``gaussian-noise`` σ,
    ``laplacian-noise`` √2·b, ``dp-sgd`` σ(b/pool)·C / b on a step of b texts (noise on the sum of b
    clipped per-sample gradients, averaged); stacked noises add in variance. FedSGD (``lr`` None) is one
    step whose gradient is the update. FedAvg with plain SGD (``lr``): the estimate −Δθ / (lr · steps)
    is the steps' mean gradient, so per-step noise averages over the steps and noise on the released
    update shrinks by lr · steps. None without noise. Rescaling (clipping) is not modelled."""
    steps = len(step_sizes)
    at_step = at_release = 0.0
    for entry in entries:
        registered = DEFENSES.get(entry["name"]).name
        params: Any = DEFENSES.validate(entry["name"], entry.get("params"))
        stage = getattr(params, "stage", "release")
        if registered == "dp-sgd":
            at_step += sum((params.sigma(min(1.0, b / pool)) * params.clip / b) ** 2 for b in step_sizes)
            continue
        if registered == "gaussian-noise":
            variance = params.sigma**2
        elif registered == "laplacian-noise":
            variance = 2 * params.scale**2
        else:
            continue
        if stage == "step":
            at_step += variance * steps
        else:
            at_release += variance
    at_step /= steps**2  # the mean of the steps' gradients
    if lr is not None:
        at_release /= (lr * steps) ** 2
    total = at_step + at_release
    return math.sqrt(total) if total > 0 else None


def step_sizes(batch: int, batch_size: int, epochs: int) -> list[int]:
    """The minibatch sizes of FedAvg's local steps over ``batch`` texts (the last of an epoch short)."""
    one = [batch_size] * (batch // batch_size) + ([batch % batch_size] if batch % batch_size else [])
    return one * epochs


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
