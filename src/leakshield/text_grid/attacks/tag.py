"""TAG (Deng et al., EMNLP Findings 2021) in a text grid: gradient matching on continuous embeddings."""

from __future__ import annotations

import pydantic

from leakshield.text.tag import tag_attack
from leakshield.text_grid.attacks.base import (
    TEXT_ATTACKS,
    KnownLabels,
    TextAttack,
    TextAttackInput,
    TextAttackOutput,
)
from leakshield.text_grid.attacks.length import dummy_length
from leakshield.threats import Adversary, Knowledge, Threat


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
