"""Tokens read off the embedding gradients of one sequence: DAGER's token step where rounding or noise
drowns its span check (:mod:`leakshield.text.dager`).

Both text models add a word and a position embedding before anything else (BERT: LN(e_v + p_t + type₀);
GPT-2: e_v + p_t), so the gradient reaching both at position t is one vector u_t:
∂L/∂p_t = u_t and ∂L/∂e_v = Σ_{t: token t is v} u_t. For a batch of one sequence, a token that occurs
once has its word row *equal* to its position's row — rounding both to fp16 keeps them equal, as it
rounds the same float32 — and a token that occurs k times has the sum of k position rows. So:

1. positions: the position rows above the noise floor; tokens (the bag): the word rows above it;
2. each position takes the token whose row is nearest, where that distance is within the tolerance
   (mutual nearest pairs first);
3. each token left is matched to the subset of 2–:data:`MOST_REPEATS` positions left whose rows sum
   nearest to its row, within the tolerance;
4. a position still unmatched takes its nearest token (a token repeated more than
   :data:`MOST_REPEATS` times, or left among more than :data:`MOST_LEFT` unmatched positions, comes
   back so: its positions may read another token).

Tolerances come from the defense's public parameters: ``rounding`` (the relative rounding of a
released value, fp16: 2⁻¹¹) scales with the rows' norms; ``noise_std`` (known Gaussian noise per
entry) adds 3σ·√(rows·d). Measured on the leaderboard's text model (BERT, width 64, untrained, batch 1,
reviews of the train split): every once-occurring token at distance 0 from its position under fp16.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping

import torch

from leakshield.text.models import TextClassifier
from leakshield.text.tokenizer import PAD

#: the largest number of positions one token's word row is split into
MOST_REPEATS = 4
#: the relative rounding of a float32 sum (the rows are summed in another order than the backward pass)
FLOAT32_ROUNDING = 2.0**-20
#: the tolerance's factor on the rounding of one row (rounding error is at most half a spacing per entry)
ROUNDING_FACTOR = 4.0
#: the tolerance's factor on the noise of the rows compared (in standard deviations of their norm)
NOISE_FACTOR = 3.0
#: fp16's absolute rounding below its smallest normal number (half the subnormal spacing 2⁻²⁴)
SUBNORMAL_ROUNDING = 2.0**-25
#: unmatched positions beyond which repeats are not searched (the subsets grow combinatorially)
MOST_LEFT = 16


def _name(model: TextClassifier, part: str, gradient: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
    module = model.word_embeddings if part == "word" else model.position_embeddings
    for name, parameter in model.named_parameters():
        if parameter is module.weight:
            return gradient.get(name)
    return None


def _tolerance(norm: float, rows: int, d: int, rounding: float | None, noise_std: float | None) -> float:
    """How far apart a word row and the sum of ``rows`` position rows may be and still match."""
    tolerance = FLOAT32_ROUNDING * (rows + 1) * max(norm, 1e-30)
    if rounding is not None:
        tolerance += ROUNDING_FACTOR * rows * (rounding * norm + SUBNORMAL_ROUNDING * math.sqrt(d))
    if noise_std is not None:
        tolerance += NOISE_FACTOR * noise_std * math.sqrt((rows + 1) * d)
    return tolerance


def embedding_row_tokens(
    model: TextClassifier,
    gradient: Mapping[str, torch.Tensor],
    *,
    rounding: float | None = None,
    noise_std: float | None = None,
) -> list[int] | None:
    """The token ids of one sequence, position by position (None where the gradient has no embedding
    rows, or no position row stands above the noise)."""
    word, place = _name(model, "word", gradient), _name(model, "position", gradient)
    if word is None or place is None:
        return None
    word, place = word.detach().double().cpu(), place.detach().double().cpu()
    d = word.shape[1]
    floor = 0.0 if noise_std is None else NOISE_FACTOR * noise_std * math.sqrt(d) * 1.5
    positions = [t for t in range(place.shape[0]) if float(place[t].norm()) > floor]
    if not positions:
        return None
    positions = list(range(positions[-1] + 1))  # a position inside the sequence is never dropped
    bag = [v for v in range(word.shape[0]) if v != PAD and float(word[v].norm()) > floor]
    if not bag:
        return None
    distance = torch.cdist(word[bag], place[positions])  # bag × positions
    found: dict[int, int] = {}
    for k, t in enumerate(positions):  # mutual nearest pairs within the tolerance
        v = int(distance[:, k].argmin())
        if int(distance[v].argmin()) == k and float(distance[v, k]) <= _tolerance(
            float(place[t].norm()), 1, d, rounding, noise_std
        ):
            found[t] = bag[v]
    used = set(found.values())
    for v in sorted((v for v in bag if v not in used), key=lambda v: -float(word[v].norm())):
        left = [t for t in positions if t not in found]
        if len(left) > MOST_LEFT:
            break
        best: tuple[float, tuple[int, ...]] | None = None
        for size in range(2, min(MOST_REPEATS, len(left)) + 1):
            for subset in itertools.combinations(left, size):
                gap = float((word[v] - place[list(subset)].sum(0)).norm())
                if gap <= _tolerance(float(word[v].norm()), size, d, rounding, noise_std) and (
                    best is None or gap < best[0]
                ):
                    best = (gap, subset)
            if best is not None:
                break
        if best is not None:
            found.update(dict.fromkeys(best[1], v))
    for k, t in enumerate(positions):  # the rest: the nearest token
        if t not in found:
            found[t] = bag[int(distance[:, k].argmin())]
    return [found[t] for t in positions]
