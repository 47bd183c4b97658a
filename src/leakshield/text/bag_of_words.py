"""The bag-of-words leak: which tokens a client's batch holds, read off the word embedding's gradient
(Melis et al., IEEE S&P 2019; the first step of LAMP and DAGER).

A token's embedding row receives gradient only through the positions that hold it, so with an input
embedding tied to no output layer the rows with a non-zero gradient are exactly the batch's tokens
(every occurrence, whatever its position or sequence; padding excluded, its row being masked or fixed).
It is the baseline every text defense must beat: the words leak even where their order does not.

With a language-model head tied to the embedding (GPT-2's), every row also receives the output
softmax's gradient, which is non-zero for every token of the vocabulary: the set is then the whole
vocabulary and says nothing (tested).
"""

from __future__ import annotations

import torch
from torch import nn


def embedding_parameter(model: nn.Module) -> str:
    """The name (in ``named_parameters``) of the model's input word embedding."""
    embedding = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if embedding is None and hasattr(model, "word_embeddings"):
        embedding = model.word_embeddings
    for name, parameter in model.named_parameters():
        if embedding is not None and parameter is embedding.weight:
            return name
    raise ValueError(f"{type(model).__name__} has no input word embedding")


def bag_of_words(
    embedding_gradient: torch.Tensor, tolerance: float = 0.0, noise_std: float | None = None
) -> torch.Tensor:
    """Sorted token ids whose embedding row has an entry of magnitude above ``tolerance`` (vocab ×
    width gradient; 0 for exact arithmetic). ``noise_std``: the standard deviation of Gaussian noise a
    defense added to every entry (an attacker knows the defense's parameters); then a row is kept when
    its squared norm exceeds what noise alone reaches 5 standard deviations above its mean (σ²·χ²_w:
    mean w·σ², standard deviation σ²·√(2w) for width w)."""
    if noise_std is not None:
        width = embedding_gradient.shape[1]
        limit = noise_std**2 * (width + 5 * (2 * width) ** 0.5)
        return (embedding_gradient.pow(2).sum(dim=1) > limit).nonzero().flatten()
    return (embedding_gradient.abs() > tolerance).any(dim=1).nonzero().flatten()
