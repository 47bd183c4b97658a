"""The bag of words: which tokens a batch holds, read off the input embedding's gradient rows."""

from __future__ import annotations

import torch

from leakshield.registry import Params
from leakshield.text.bag_of_words import bag_of_words, embedding_parameter
from leakshield.text.lora import AdapterClassifier
from leakshield.text_grid.attacks.base import TEXT_ATTACKS, TextAttack, TextAttackInput, TextAttackOutput
from leakshield.threats import Adversary, Knowledge, Threat


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
