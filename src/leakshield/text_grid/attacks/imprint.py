"""The sequence imprint in a text grid: a malicious server's imprint block before the first attention
layer."""

from __future__ import annotations

import pydantic
import torch

from leakshield.registry import Params
from leakshield.text.imprint import imprint_model, sequence_imprint
from leakshield.text.models import TextClassifier
from leakshield.text_grid.attacks.base import TEXT_ATTACKS, TextAttack, TextAttackInput, TextAttackOutput
from leakshield.threats import Adversary, Knowledge, Threat


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
