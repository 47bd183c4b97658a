"""The bag-of-words leak: which tokens a client's batch holds, read off the word embedding's gradient
(Melis et al., IEEE S&P 2019; the token set LAMP starts from, which DAGER reads from the first
attention layer's gradient instead).

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
from scipy.stats import chi2
from torch import nn


def embedding_parameter(model: nn.Module) -> str:
    """The name (in ``named_parameters``) of the model's input word embedding."""
    embedding = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if embedding is None and hasattr(model, "word_embeddings"):
        embedding = model.word_embeddings
    if embedding is None:
        raise ValueError(f"{type(model).__name__} has no input word embedding")
    return parameter_name(model, embedding.weight)


def parameter_name(model: nn.Module, parameter: torch.Tensor) -> str:
    """The name (in ``named_parameters``) of ``parameter``, a parameter of ``model``."""
    name = next((n for n, p in model.named_parameters() if p is parameter), None)
    if name is None:
        raise ValueError(f"{type(model).__name__} holds no such parameter")
    return name


#: the chance that a row of noise alone passes :func:`rows_with_signal` anywhere in the matrix
FALSE_ROW_RATE = 0.01


def rows_with_signal(gradient: torch.Tensor, noise_std: float | None = None) -> torch.Tensor:
    """Sorted indices of the rows of ``gradient`` (rows × width) that carry a gradient: any non-zero
    entry, or with ``noise_std``, the standard deviation of Gaussian noise a defense added to every
    entry (an attacker knows the defense's parameters), a squared norm above what noise alone reaches
    (σ²·χ²_w) in any row but with chance :data:`FALSE_ROW_RATE` (Bonferroni over the rows)."""
    if noise_std is None:
        return (gradient != 0).any(dim=1).nonzero().flatten()
    rows, width = gradient.shape
    limit = noise_std**2 * float(chi2.isf(FALSE_ROW_RATE / rows, width))
    return (gradient.double().pow(2).sum(dim=1) > limit).nonzero().flatten()


def bag_of_words(embedding_gradient: torch.Tensor, noise_std: float | None = None) -> torch.Tensor:
    """Sorted token ids whose word-embedding row (vocab × width gradient) carries a gradient
    (:func:`rows_with_signal`; ``noise_std`` under a known Gaussian noise)."""
    return rows_with_signal(embedding_gradient, noise_std)
