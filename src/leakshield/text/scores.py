"""How much of a batch's text a reconstruction recovered: ROUGE-1/2/L F-measures (Lin, 2004; the
``rouge-score`` package), token accuracy and exact matches, after pairing reconstructed and true
sequences (Hungarian matching on ROUGE-1, as LAMP and DAGER evaluate batches), and the level a guess
without information reaches: the public split's most frequent words at the victim's length."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch
from scipy.optimize import linear_sum_assignment

from leakshield.errors import LeakshieldError
from leakshield.text.extra import text_extra
from leakshield.text.tokenizer import SPECIALS, TextTokenizer

ROUGE = ("rouge1", "rouge2", "rougeL")


def _pair_scores(predicted: Sequence[str], truth: Sequence[str]) -> list[list[Any]]:
    """ROUGE-1/2/L of every (true, predicted) pair: row per true text."""
    if len(predicted) != len(truth):
        raise LeakshieldError(f"{len(predicted)} reconstructed texts for {len(truth)} true ones")
    scorer = text_extra("rouge_score.rouge_scorer").RougeScorer(list(ROUGE))
    return [[scorer.score(t, p) for p in predicted] for t in truth]


def _pairing(scores: list[list[Any]]) -> list[int]:
    gain = [[pair["rouge1"].fmeasure for pair in row] for row in scores]
    rows, columns = linear_sum_assignment(gain, maximize=True)
    return [int(c) for _, c in sorted(zip(rows, columns, strict=True))]


def matched(predicted: Sequence[str], truth: Sequence[str]) -> list[int]:
    """For each true text, the index of the predicted text paired with it: the pairing that maximizes
    the summed ROUGE-1 F-measure (Hungarian algorithm)."""
    return _pairing(_pair_scores(predicted, truth))


def paired_scores(predicted: Sequence[str], truth: Sequence[str]) -> list[tuple[int, dict[str, float]]]:
    """Per true text: the index of the predicted text :func:`matched` pairs with it, and the pair's
    ROUGE-1/2/L F-measures and exact match (each pair scored once)."""
    every = _pair_scores(predicted, truth)
    out = []
    for i, (t, k) in enumerate(zip(truth, _pairing(every), strict=True)):
        scores = every[i][k]
        found = {name: scores[name].fmeasure for name in ROUGE}
        out.append((k, {**found, "exact": float(predicted[k].split() == t.split())}))
    return out


def text_scores(predicted: Sequence[str], truth: Sequence[str]) -> list[dict[str, float]]:
    """Per true text (after :func:`matched` pairing): ROUGE-1/2/L F-measures and exact match."""
    return [scores for _, scores in paired_scores(predicted, truth)]


def token_accuracy(predicted: torch.Tensor, truth: torch.Tensor) -> float:
    """Share of the true sequence's words (positions that are no special token) whose id the
    reconstruction has at the same position (rows already paired)."""
    words = truth >= len(SPECIALS)
    length = min(predicted.shape[1], truth.shape[1])
    hit = (predicted[:, :length] == truth[:, :length]) & words[:, :length]
    return float(hit.sum() / words.sum().clamp_min(1))


def no_information_text(public_ids: torch.Tensor, length: int, tokenizer: TextTokenizer) -> str:
    """The guess without information: the ``length`` − 2 most frequent whole words of the public split
    (tokens that are no special token and no ``##`` piece), decoded, for a victim of ``length`` tokens
    with ``[CLS]`` and ``[SEP]``."""
    pieces = {
        i for i, token in enumerate(tokenizer.tokens(range(tokenizer.vocab_size))) if token.startswith("##")
    }
    counts = Counter(i for i in public_ids.flatten().tolist() if i >= len(SPECIALS) and i not in pieces)
    return tokenizer.decode([i for i, _ in counts.most_common(max(length - 2, 0))])
