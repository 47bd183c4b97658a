"""The cross-device models, as dicts of tensors with a pure forward (``torch.func`` trains every
sampled client at once with ``vmap``):

* :func:`bag_classifier` — text: the mean of a review's word embeddings (padding excluded) through a
  linear layer, the fastText classifier (Joulin et al., EACL 2017). Its embedding gradient is non-zero
  exactly on the rows of the words a client used: the word-set leak of Melis et al. (S&P 2019).
* :func:`mlp_classifier` — images: one fully connected ReLU layer and a linear output, the model whose
  first layer the analytic attack inverts (Phong et al., 2018).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch.nn import functional as F

Params = dict[str, torch.Tensor]


def bag_classifier(vocab: int, classes: int, width: int = 16, seed: int = 0) -> Params:
    """Embedding vocab × width (N(0, 1/width)), linear width × classes (uniform ±1/√width), zero bias."""
    g = torch.Generator().manual_seed(seed)
    bound = 1 / math.sqrt(width)
    return {
        "embedding": torch.randn(vocab, width, generator=g) * bound,
        "weight": (torch.rand(width, classes, generator=g) * 2 - 1) * bound,
        "bias": torch.zeros(classes),
    }


def bag_logits(params: Params, ids: torch.Tensor) -> torch.Tensor:
    """Logits of token ids (rows × length; 0 is padding)."""
    mask = (ids != 0).unsqueeze(-1).to(params["embedding"].dtype)
    pooled = (params["embedding"][ids] * mask).sum(1) / mask.sum(1).clamp(min=1)
    return pooled @ params["weight"] + params["bias"]


def mlp_classifier(features: int, classes: int, hidden: int = 64, seed: int = 0) -> Params:
    """Linear features → hidden (ReLU) → classes, PyTorch's default uniform initialisation."""
    g = torch.Generator().manual_seed(seed)

    def uniform(*shape: int, fan_in: int) -> torch.Tensor:
        return (torch.rand(*shape, generator=g) * 2 - 1) / math.sqrt(fan_in)

    return {
        "hidden.weight": uniform(hidden, features, fan_in=features),
        "hidden.bias": uniform(hidden, fan_in=features),
        "out.weight": uniform(classes, hidden, fan_in=hidden),
        "out.bias": uniform(classes, fan_in=hidden),
    }


def mlp_logits(params: Params, x: torch.Tensor) -> torch.Tensor:
    hidden = F.relu(x @ params["hidden.weight"].T + params["hidden.bias"])
    return hidden @ params["out.weight"].T + params["out.bias"]


def logits_for(kind: str) -> Callable[[Params, torch.Tensor], torch.Tensor]:
    """The forward of a population's kind (``text`` or ``image``)."""
    return bag_logits if kind == "text" else mlp_logits


def accuracy(params: Params, kind: str, x: torch.Tensor, y: torch.Tensor, chunk: int = 4096) -> float:
    forward = logits_for(kind)
    with torch.no_grad():
        right = sum(int((forward(params, x[i : i + chunk]).argmax(1) == y[i : i + chunk]).sum())
                    for i in range(0, len(y), chunk))  # fmt: skip
    return right / max(len(y), 1)
