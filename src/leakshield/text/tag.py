"""TAG, gradient matching for transformers (Deng et al., *TAG: Gradient Attack on Transformer-based
Language Models*, Findings of EMNLP 2021): DLG's optimization on continuous word embeddings instead of
token ids, with an L2 + L1 gradient distance, decoded to the nearest tokens.

The server holds the model and a client's update (the gradient of one batch) and knows the tokenizer.
It reads what the update gives away for free, then optimizes the rest:

- **length**: the position-embedding rows with a non-zero gradient are the positions the batch used
  (padding reaches no loss), so the longest sequence's length leaks; every dummy sequence gets it;
- **labels**: of a batch of one, the only negative entry of the head's bias gradient (softmax − one-hot,
  as iDLG reads it); of larger batches they must be given (``labels``);
- **framing**: ``[CLS]`` first and ``[SEP]`` last, as the tokenizer frames every sequence; these rows
  are fixed, the inner positions optimized.

The objective over the matched parameters (all but the word embedding, which continuous inputs bypass),
in the model's order i = 0 … n−1 with weight w_i = 1 − i/n on the L1 term (earlier layers count more):
½ Σ_i (‖∇′_i − ∇_i‖² + α w_i ‖∇′_i − ∇_i‖₁), α = ``l1_scale``. This is TAG as the breaching library
implements it (``tag-euclidean``, ``tag_scale`` 0.1, the linear scale on the L1 term; Adam with
gradients clipped to norm 1); the paper's own per-layer α schedule is not reproduced here. Breaching's
step of 0.05 comes with a warm-up and decay; a constant step of 0.05 stalled here (a 2-layer BERT of
width 64, one review of 10 tokens: distance 0.047 after 150 steps and 0.046 after 1,000, ROUGE-1 0.46),
0.01 recovered the review exactly (distance 0.016), so 0.01 is the default. Each
optimized embedding is decoded to the word (not a special token) whose embedding row is nearest
(Euclidean).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from leakshield.errors import LeakshieldError
from leakshield.text.bag_of_words import rows_with_signal
from leakshield.text.models import TextClassifier
from leakshield.text.tokenizer import CLS, SEP, SPECIALS


@dataclass(frozen=True)
class TagResult:
    """Decoded token ids (batch × length, framed by ``[CLS]`` and ``[SEP]``), the labels used, the
    recovered length and the final gradient distance."""

    ids: torch.Tensor
    labels: torch.Tensor
    length: int
    distance: float


def leaked_length(
    model: TextClassifier, gradient: Mapping[str, torch.Tensor], noise_std: float | None = None
) -> int:
    """The longest sequence's length: the last position-embedding row that carries a gradient, + 1
    (:func:`~leakshield.text.bag_of_words.rows_with_signal`; ``noise_std`` under known Gaussian noise,
    where rows whose gradient noise drowns are not seen)."""
    name = next((n for n, p in model.named_parameters() if p is model.position_embeddings.weight), None)
    if name is None or name not in gradient:
        raise LeakshieldError("the update holds no position embedding (frozen, as under LoRA): no length")
    used = rows_with_signal(gradient[name], noise_std)
    if not len(used):
        raise LeakshieldError("the update's position embedding is all zero: no length can be read")
    return int(used.max()) + 1


def leaked_label(model: TextClassifier, gradient: Mapping[str, torch.Tensor]) -> int:
    """A batch of one's label: the only negative entry of the head's bias gradient."""
    if "head.bias" not in gradient:
        raise LeakshieldError("the update holds no head bias (a LoRA head not shared): no label to read")
    return int(gradient["head.bias"].argmin())


def labels_and_length(
    model: TextClassifier,
    gradient: Mapping[str, torch.Tensor],
    batch: int,
    labels: torch.Tensor | None,
    length: int | None,
    noise_std: float | None,
    attack: str,
) -> tuple[torch.Tensor, int]:
    """The labels (given, or a batch of one's :func:`leaked_label`) and the dummy length (given, or
    :func:`leaked_length`) an optimisation attack named ``attack`` starts from, checked."""
    if labels is None:
        if batch != 1:
            raise LeakshieldError(
                f"{attack} on a batch of {batch}: pass its labels (only a batch of one leaks it)"
            )
        labels = torch.tensor([leaked_label(model, gradient)])
    if len(labels) != batch:
        raise LeakshieldError(f"{len(labels)} labels for a batch of {batch}")
    length = length if length is not None else leaked_length(model, gradient, noise_std)
    if length < 3:
        raise LeakshieldError(f"a leaked length of {length}: nothing between [CLS] and [SEP]")
    return labels, length


def matched_parameters(model: TextClassifier, gradient: Mapping[str, torch.Tensor]) -> list[str]:
    """The parameters whose gradients are matched, in the model's order: all in ``gradient`` but the
    word embedding, which continuous inputs bypass."""
    skip = model.word_embeddings.weight
    return [n for n, p in model.named_parameters() if p is not skip and n in gradient]


def tag_attack(
    model: TextClassifier,
    gradient: Mapping[str, torch.Tensor],
    batch: int = 1,
    labels: torch.Tensor | None = None,
    iterations: int = 1000,
    lr: float = 0.01,
    l1_scale: float = 0.1,
    seed: int = 0,
    length: int | None = None,
    noise_std: float | None = None,
) -> TagResult:
    """Reconstruct ``batch`` sequences from ``gradient`` (parameter name → the batch's mean loss
    gradient) of ``model`` (eval mode), starting from normal embeddings drawn from ``seed``.
    ``length``: the sequences' length when known (default: :func:`leaked_length`, with ``noise_std``
    the standard deviation of a known Gaussian noise on the update)."""
    labels, length = labels_and_length(model, gradient, batch, labels, length, noise_std, "TAG")
    names = matched_parameters(model, gradient)
    named = dict(model.named_parameters())
    params = [named[n] for n in names]
    targets = [gradient[n].detach() for n in names]
    weights = [1.0 - i / len(names) for i in range(len(names))]
    table = model.word_embeddings.weight.detach()
    generator = torch.Generator().manual_seed(seed)
    inner = torch.randn(batch, length - 2, table.shape[1], generator=generator) * float(table.std())
    inner = inner.to(table.device).requires_grad_(True)
    frame = table[torch.tensor([CLS, SEP], device=table.device)]
    mask = torch.ones(batch, length, dtype=torch.bool, device=table.device)
    optimizer = torch.optim.Adam([inner], lr=lr)

    def distance() -> torch.Tensor:
        embeddings = torch.cat([frame[:1].expand(batch, 1, -1), inner, frame[1:].expand(batch, 1, -1)], 1)
        loss = F.cross_entropy(model.forward_embeddings(embeddings, mask), labels.to(table.device))
        dummy = torch.autograd.grad(loss, params, create_graph=True)
        return 0.5 * sum(((d - t) ** 2).sum() + l1_scale * w * (d - t).abs().sum()
                         for w, d, t in zip(weights, dummy, targets, strict=True))  # fmt: skip

    for _ in range(iterations):
        (inner.grad,) = torch.autograd.grad(distance(), [inner])  # the model's own .grad stays untouched
        torch.nn.utils.clip_grad_norm_([inner], 1.0)
        optimizer.step()
    with torch.no_grad():
        words = table[len(SPECIALS) :]  # an inner position holds a word, never a special token
        nearest = torch.cdist(inner.reshape(-1, table.shape[1]), words).argmin(1) + len(SPECIALS)
        nearest = nearest.view(batch, length - 2)
        ids = torch.cat([torch.full((batch, 1), CLS), nearest.cpu(), torch.full((batch, 1), SEP)], 1)
    return TagResult(ids, labels.cpu(), length, float(distance().detach()))
