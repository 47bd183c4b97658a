"""DAGER's fill-in (Petrov et al., *DAGER: Exact Gradient Inversion for Large Language Models*, NeurIPS
2024; the authors' release does it in ``attack.py``, ``utils/filtering_decoder.py`` and
``utils/filtering_encoder.py``): where fewer than ``batch`` sequences pass the context check — beyond the
b·n bound, or where the search runs short — the batch is filled with the best *failing* sequences, so an
attack beyond the bound returns its best guesses instead of nothing.

How the reference ranks and fills (read there, written anew here):

- **Score**: a sequence's mean context span distance over its positions (the exact check uses each
  position; the fill-in ranks by the mean).
- **Decoder**: a beam of failing prefixes grows beside the passing ones: at each length every kept
  prefix (passing or failing) is extended by every candidate of the next position; the extensions that
  fail are ranked by their mean and the best ``batch`` *distinct* ones are kept, both as the next
  length's failing beam and as fill-in candidates of that length. The search stops at the first length
  where no extension passes, and that length's beam is dropped (past the bound, where nothing passes
  beyond the first position, the fill-in has nothing).
- **Encoder**: per length (where ``[SEP]`` passed) every combination of the candidates (sampled past
  the budget) is scored; the best ``batch`` distinct failing ones of each length are fill-in candidates.
  Candidates that exact sequences used are taken out of positions that keep another (``non-overlap``).
- **Distinct**: two sequences are alike when they agree at ``distinct`` (0.7) of their aligned
  positions or more, of the length at stake (the length being ranked; against an exact sequence the
  shorter of the two; in the final pick the longest sequence in the pool).
- **Fill**: the exact sequences first; candidates alike an exact one are dropped; then, while fewer
  than ``batch`` are picked, the lowest mean left is taken and every candidate alike it is dropped.

Deviations: a first token outside the tolerance counts as failing (the reference takes every first
candidate as passing); when every candidate is
dropped the pick stops (the reference then takes an arbitrary dropped one again); the encoder combines
every candidate within the tolerance (the reference's BERT script keeps the ``batch`` nearest per
position) and takes out the tokens of every exact sequence, not only of those found at shorter lengths.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import torch

from leakshield.text.models import TextClassifier
from leakshield.text.span import InputSpan, context_states, span_distance
from leakshield.text.tokenizer import CLS, SEP

#: the reference's ``distinct_thresh``: sequences agreeing at this share of positions are alike
DISTINCT = 0.7

Scored = list[tuple[list[int], float]]


def agreement(a: list[int], b: list[int]) -> int:
    """Positions (aligned from the start) at which ``a`` and ``b`` hold the same token."""
    return sum(1 for x, y in zip(a, b, strict=False) if x == y)


def best_distinct(scored: Scored, keep: int, length: int, distinct: float = DISTINCT) -> Scored:
    """Up to ``keep`` of ``scored`` by ascending mean, each taken dropping every one that agrees with it
    at ``distinct`` × ``length`` positions or more (itself included)."""
    left = sorted(scored, key=lambda item: item[1])
    out: Scored = []
    while left and len(out) < keep:
        sequence, mean = left[0]
        out.append((sequence, mean))
        left = [item for item in left[1:] if agreement(item[0], sequence) < distinct * length]
    return out


def fill(exact: list[list[int]], pool: Scored, batch: int, distinct: float = DISTINCT) -> list[list[int]]:
    """The ``exact`` sequences, then the best distinct failing ones of ``pool`` up to ``batch`` (module
    docstring, "Fill")."""
    if len(exact) >= batch or not pool:
        return exact[:batch]
    left = [
        (s, m) for s, m in pool
        if s not in exact and all(agreement(s, e) < distinct * min(len(s), len(e)) for e in exact)
    ]  # fmt: skip
    longest = max(len(s) for s, _ in [*pool, *((e, 0.0) for e in exact)])
    picked = best_distinct(left, batch - len(exact), longest, distinct)
    return exact + [s for s, _ in picked]


def decoder_pool(
    model: TextClassifier,
    span: InputSpan,
    candidates: list[list[int]],
    tolerance: float,
    batch: int,
    max_prefixes: int,
    distinct: float = DISTINCT,
) -> Scored:
    """A decoder's fill-in candidates: per length from two tokens, the best ``batch`` distinct failing
    prefixes by mean context distance, grown from the passing prefixes (at most ``max_prefixes``, by
    mean) and the previous length's failing beam."""
    first = torch.tensor([[t] for t in candidates[0]])
    start = span_distance(span, context_states(model, first)[:, -1]).cpu()
    # (sequence, sum of its positions' distances, passing so far)
    live = [([t], float(d), bool(d < tolerance)) for t, d in zip(candidates[0], start, strict=True)]
    pool: Scored = []
    for position in range(1, len(candidates)):
        if not live:
            break
        grown = torch.tensor([[*p, t] for p, _, _ in live for t in candidates[position]])
        distance = torch.cat(
            [span_distance(span, context_states(model, chunk)[:, -1]).cpu() for chunk in grown.split(4096)]
        )
        passing, failing = [], []
        sums, flags = _parents(live, len(candidates[position]))
        for sequence, total, ok, d in zip(grown.tolist(), sums, flags, distance.tolist(), strict=True):
            if ok and d < tolerance:
                passing.append((sequence, total + d))
            else:
                failing.append((sequence, (total + d) / len(sequence)))
        if not passing:  # as the reference: at the first length where no extension passes the search
            break  # stops, and that length's failing beam is dropped
        beam = best_distinct(failing, batch, len(grown[0]), distinct)
        pool += beam
        passing.sort(key=lambda item: item[1])
        live = [(s, t, True) for s, t in passing if s[-1] != SEP][:max_prefixes]
        live += [(s, m * len(s), False) for s, m in beam if s[-1] != SEP]
    return pool


def _parents(live: list[tuple[list[int], float, bool]], width: int) -> tuple[list[float], list[bool]]:
    """Each extension's parent sum and passing flag, in the order extensions are built."""
    return [t for _, t, _ in live for _ in range(width)], [ok for _, _, ok in live for _ in range(width)]


def encoder_scores(
    model: TextClassifier,
    span: InputSpan,
    candidates: list[list[int]],
    max_combinations: int,
    seed: int,
    exact: list[list[int]] | None = None,
) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    """Per length (its last position ``end``, where ``[SEP]`` passed): chunks of whole sequences
    [CLS] + a combination of the candidates between + [SEP] (all of them up to ``max_combinations``,
    else that many sampled) and each sequence's per-position context distances. With ``exact``, the
    tokens those sequences used are taken out of every position that keeps another candidate."""
    generator = torch.Generator().manual_seed(seed)
    for end, at_end in enumerate(candidates):
        if SEP not in at_end or end < 1:
            continue
        inner = [[t for t in c if t not in (CLS, SEP)] for c in candidates[1:end]]
        for sequence in exact or []:
            for k, c in enumerate(inner):
                used = sequence[k + 1] if k + 1 < len(sequence) else None
                if used in c and len(c) > 1:
                    c.remove(used)
        if any(not c for c in inner):
            continue
        total = 1
        for c in inner:
            total *= len(c)
        if total <= max_combinations:
            combos = torch.tensor(list(itertools.product(*inner)), dtype=torch.long).view(total, len(inner))
        else:
            picks = [torch.randint(len(c), (max_combinations,), generator=generator) for c in inner]
            combos = torch.stack([torch.tensor(c)[p] for c, p in zip(inner, picks, strict=True)], 1)
        frame = torch.full((len(combos), 1), CLS), torch.full((len(combos), 1), SEP)
        for chunk in torch.cat([frame[0], combos, frame[1]], 1).split(512):
            yield end, chunk, span_distance(span, context_states(model, chunk)).cpu()


def encoder_pool(
    model: TextClassifier,
    span: InputSpan,
    candidates: list[list[int]],
    tolerance: float,
    batch: int,
    max_combinations: int,
    seed: int,
    exact: list[list[int]],
    distinct: float = DISTINCT,
) -> Scored:
    """An encoder's fill-in candidates: per length, the best ``batch`` distinct failing sequences by
    mean context distance (module docstring, "Encoder")."""
    by_length: dict[int, Scored] = {}
    for end, chunk, distance in encoder_scores(model, span, candidates, max_combinations, seed, exact):
        failing = distance.amax(1) >= tolerance
        means = distance.mean(1)
        scored = [(chunk[k].tolist(), float(means[k])) for k in torch.nonzero(failing).flatten()]
        by_length.setdefault(end, []).extend(scored)  # ranked once per length: a chunk's pick is not final
    return [
        item for end, scored in by_length.items() for item in best_distinct(scored, batch, end + 1, distinct)
    ]
