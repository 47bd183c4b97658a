"""The text attacks a grid runs, registered with their parameters and declared threat models: the bag of
words (which words a batch holds, read off the input embedding's gradient) and TAG (Deng et al., EMNLP
Findings 2021: gradient matching on continuous embeddings, decoded to the nearest tokens).

Each attack gets a :class:`TextAttackInput`: what the observing server holds — the model it sent, the
client's gradient (FedSGD) or its estimate from a FedAvg update, −Δθ / (lr · local steps), the batch
size, and the standard deviation of the Gaussian noise its defenses add (their parameters are public,
Kerckhoffs), and, where the threat grants them, the labels."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pydantic
import torch

from leakshield.artifacts import ArtifactCache
from leakshield.defenses import DEFENSES
from leakshield.errors import ConfigError, LeakshieldError
from leakshield.registry import Params, Registry
from leakshield.text.bag_of_words import bag_of_words, embedding_parameter
from leakshield.text.dager import dager_attack
from leakshield.text.dager_lora import leaked_lora_length, lora_dager_attack
from leakshield.text.imprint import imprint_model, sequence_imprint
from leakshield.text.lamp import Distance, lamp_attack
from leakshield.text.lora import AdapterClassifier
from leakshield.text.models import TextClassifier
from leakshield.text.prior import public_prior
from leakshield.text.tag import leaked_length, tag_attack
from leakshield.threats import Adversary, Knowledge, Threat

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

    recovers_set = True

    def __call__(self, given: TextAttackInput) -> TextAttackOutput:
        if isinstance(given.model, AdapterClassifier):  # LoRA: the frozen embedding is in no update
            return TextAttackOutput(bag=torch.zeros(0, dtype=torch.long))
        grad = given.gradient[embedding_parameter(given.model)]
        return TextAttackOutput(bag=bag_of_words(grad, noise_std=given.noise_std).cpu())


def dummy_length(given: TextAttackInput) -> int:
    """The dummy sequences' length: the one the position embedding's gradient leaks (under LoRA, where
    it is frozen: the positions DAGER's token check passes), or the longest the model takes when that is
    under 3 or no position shows a gradient above the noise."""
    if isinstance(given.model, AdapterClassifier):  # frozen position rows: the adapters' span tells it
        length = leaked_lora_length(given.model, given.gradient, noise_std=given.noise_std) or 0
        return length if length >= 3 else given.model.max_length
    try:
        length = leaked_length(given.model, given.gradient, given.noise_std)
    except LeakshieldError:  # no position row stands above the noise
        length = 0
    return length if length >= 3 else given.model.max_length


class KnownLabels(Params):
    """labels_known: use the batch's true labels beyond a batch of one (a batch of one leaks its label
    through the head's bias gradient)."""

    labels_known: bool = pydantic.Field(
        default=True, description="use the true labels beyond a batch of one (one label always leaks)"
    )


class TagParams(KnownLabels):
    """iterations: Adam steps on the dummy embeddings; lr: their step size; l1_scale: weight of TAG's L1
    term beside the L2 distance (breaching's 0.1); labels_known: use the batch's true labels beyond a
    batch of one (a batch of one leaks its label through the head's bias gradient)."""

    iterations: int = pydantic.Field(default=300, ge=1, description="Adam steps on the dummy embeddings")
    lr: float = pydantic.Field(default=0.01, gt=0, description="the steps' size (Adam)")
    l1_scale: float = pydantic.Field(default=0.1, ge=0, description="weight of the L1 term beside L2")


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
    """TAG with the length of :func:`dummy_length`."""

    needs_labels = True
    params: TagParams

    def __call__(self, given: TextAttackInput) -> TextAttackOutput:
        length = dummy_length(given)
        labels = given.labels if given.batch > 1 and self.params.labels_known else None
        result = tag_attack(given.model, given.gradient, batch=given.batch, labels=labels,
                            iterations=self.params.iterations, lr=self.params.lr,
                            l1_scale=self.params.l1_scale, seed=given.seed, length=length)  # fmt: skip
        return TextAttackOutput(ids=result.ids)


class DagerParams(Params):
    """Tolerances of the span checks (distance of a unit state to the span, 0 … 1) and the search's
    bounds; defaults as measured in :mod:`leakshield.text.dager`."""

    token_tolerance: float = pydantic.Field(default=1e-2, gt=0, lt=1, description="first-layer span check")
    sequence_tolerance: float = pydantic.Field(default=1.5e-4, gt=0, lt=1, description="context span check")
    rank_tolerance: float = pydantic.Field(
        default=1e-7, gt=0, lt=1, description="singular values below this share of the largest are rounding"
    )
    max_prefixes: int = pydantic.Field(default=256, ge=1, description="decoder prefixes kept per position")
    max_combinations: int = pydantic.Field(
        default=5000, ge=1, description="encoder combinations scored per length (sampled beyond)"
    )
    embedding_step: bool = pydantic.Field(
        default=True,
        description="under the defense's known rounding or noise, read one sequence's tokens off the "
        "embedding gradients (the span check cannot see through them)",
    )
    fill_in: bool = pydantic.Field(
        default=True,
        description="where fewer sequences pass than the batch holds, fill it with the best failing ones "
        "as the reference does (leakshield.text.dager_fill)",
    )


@TEXT_ATTACKS.register(
    "dager",
    summary="DAGER: exact recovery by span checks on the first attention layer's gradient (b·n < d − 1)",
    reference="Petrov et al., DAGER: Exact Gradient Inversion for Large Language Models, NeurIPS 2024",
    params=DagerParams,
    threat=Threat(Adversary.OBSERVING_SERVER, frozenset({Knowledge.PROTOCOL, Knowledge.DEFENSES})),
)
class DagerTextAttack(TextAttack):
    """DAGER (:func:`~leakshield.text.dager.dager_attack`); no labels, no optimisation."""

    params: DagerParams

    def __call__(self, given: TextAttackInput) -> TextAttackOutput:
        p = self.params
        if isinstance(given.model, AdapterClassifier):
            # the adapters' own tolerance defaults (dager_lora's docstring) unless the config sets them
            chosen = {k: getattr(p, k) for k in p.model_fields_set & {"token_tolerance", "rank_tolerance"}}
            result = lora_dager_attack(given.model, given.gradient, given.batch,
                                       sequence_tolerance=p.sequence_tolerance, max_prefixes=p.max_prefixes,
                                       max_combinations=p.max_combinations, noise_std=given.noise_std,
                                       seed=given.seed, **chosen)  # fmt: skip
            return TextAttackOutput(ids=result.ids)
        result = dager_attack(given.model, given.gradient, given.batch, token_tolerance=p.token_tolerance,
                              sequence_tolerance=p.sequence_tolerance, rank_tolerance=p.rank_tolerance,
                              max_prefixes=p.max_prefixes, max_combinations=p.max_combinations,
                              noise_std=given.noise_std, rounding=given.rounding,
                              embedding_step=p.embedding_step, fill_in=p.fill_in,
                              seed=given.seed)  # fmt: skip
        return TextAttackOutput(ids=result.ids)


class LampParams(KnownLabels):
    """LAMP's search (:mod:`leakshield.text.lamp`); ``prior``: score reorderings with the language model
    trained on the public split (false: the ablation without it); coefficients default to the paper's
    for ``distance``."""

    distance: Distance = pydantic.Field(default="cos", description="cos (LAMP_cos), l1l2 or l2")
    iterations: int = pydantic.Field(default=2000, ge=1, description="Adam steps on the dummy embeddings")
    lr: float = pydantic.Field(default=0.01, gt=0, description="the steps' size, decayed every 50 steps")
    lr_decay: float = pydantic.Field(default=0.89, gt=0, le=1, description="factor every 50 steps")
    candidates: int = pydantic.Field(default=200, ge=1, description="reorderings tried per sequence")
    init_candidates: int = pydantic.Field(default=500, ge=1, description="random starts, the best kept")
    swap_every: int = pydantic.Field(default=75, ge=1, description="steps between discrete moves")
    prior: bool = pydantic.Field(default=True, description="the language prior in the discrete step")
    prior_epochs: int = pydantic.Field(default=8, ge=1, description="the prior's training epochs")
    prior_weight: float | None = pydantic.Field(default=None, ge=0, description="α_lm (None: paper's)")


@TEXT_ATTACKS.register(
    "lamp",
    summary="LAMP: TAG's continuous search + reorderings scored with a GPT-2 prior trained on public text",
    reference="Balunović et al., LAMP: Extracting Text from Gradients with Language Model Priors, NeurIPS "
    "2022 (prior: a small GPT-2 trained on the public split, no pretrained weights)",
    params=LampParams,
    threat=Threat(
        Adversary.OBSERVING_SERVER,
        frozenset({Knowledge.PROTOCOL, Knowledge.DEFENSES, Knowledge.LABELS, Knowledge.PUBLIC_SPLIT}),
    ),
)
class LampTextAttack(TextAttack):
    """LAMP with the length read as TAG reads it."""

    needs_labels = True
    params: LampParams

    def __call__(self, given: TextAttackInput) -> TextAttackOutput:
        p = self.params
        prior = None
        if p.prior:
            if given.public is None:
                raise LeakshieldError("LAMP's prior needs the server's public text (prior: false drops it)")
            device = given.model.word_embeddings.weight.device
            prior = public_prior(given.public, given.model.word_embeddings.num_embeddings, given.cache,
                                 epochs=p.prior_epochs, device=device)  # fmt: skip
        length = dummy_length(given)
        labels = given.labels if given.batch > 1 and p.labels_known else None
        result = lamp_attack(given.model, given.gradient, prior, given.batch, labels, distance=p.distance,
                             iterations=p.iterations, lr=p.lr, lr_decay=p.lr_decay, candidates=p.candidates,
                             init_candidates=p.init_candidates, swap_every=p.swap_every,
                             prior_weight=p.prior_weight, seed=given.seed, length=length)  # fmt: skip
        return TextAttackOutput(ids=result.ids)


class SequenceImprintParams(Params):
    """bins: the imprint block's bins (more bins, fewer tokens sharing one; its update grows by
    3·d·bins numbers); scale: s, the size of the bins' gradients against what defenses add (noise,
    rounding, pruning; the block's forward never changes, and exact recovery is scale-free); tolerance:
    relative distance at which a recovered state names a (token, position) and two mean states are one
    sequence."""

    bins: int = pydantic.Field(default=4096, ge=2, description="imprint bins (3·d·bins parameters)")
    scale: float = pydantic.Field(default=1.0, gt=0, description="s: the bins' gradient scale")
    tolerance: float = pydantic.Field(default=1e-3, gt=0, lt=1, description="relative match tolerance")


@TEXT_ATTACKS.register(
    "sequence-imprint",
    summary="malicious server: an imprint block before the first attention layer bins token states "
    "beside their sequence's mean state; single bins give tokens, the mean groups them [4096 bins]",
    reference="Fowl et al., Robbing the Fed, ICLR 2022 (the imprint layout); Fowl et al., Decepticons, "
    "ICLR 2023 (separating sequences in a transformer)",
    params=SequenceImprintParams,
    threat=Threat(Adversary.ARCHITECTURE_SERVER, frozenset({Knowledge.PROTOCOL, Knowledge.PUBLIC_SPLIT})),
)
class SequenceImprintAttack(TextAttack):
    """:mod:`leakshield.text.imprint`: the server sends the model with the block (:meth:`prepare`, its
    thresholds from the public split), then reads the sequences off the block's gradient. Needs FedSGD
    (one step): local steps mix the bins' gradients with moved thresholds."""

    params: SequenceImprintParams

    def prepare(self, model: TextClassifier, public: torch.Tensor, seed: int) -> TextClassifier:
        return imprint_model(model, public, self.params.bins, scale=self.params.scale, seed=seed)

    def __call__(self, given: TextAttackInput) -> TextAttackOutput:
        result = sequence_imprint(
            given.model, given.gradient, given.batch, tolerance=self.params.tolerance, rounding=given.rounding
        )
        return TextAttackOutput(ids=result.ids)


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
