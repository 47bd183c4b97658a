"""LAMP (Balunović et al., NeurIPS 2022) in a text grid: TAG's search with a language prior's reorderings."""

from __future__ import annotations

import pydantic

from leakshield.errors import LeakshieldError
from leakshield.text.lamp import Distance, lamp_attack
from leakshield.text.prior import public_prior
from leakshield.text_grid.attacks.base import (
    TEXT_ATTACKS,
    KnownLabels,
    TextAttack,
    TextAttackInput,
    TextAttackOutput,
)
from leakshield.text_grid.attacks.length import dummy_length
from leakshield.threats import Adversary, Knowledge, Threat


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
