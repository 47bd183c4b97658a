"""DAGER, exact gradient inversion for transformers (Petrov et al., *DAGER: Exact Gradient Inversion
for Large Language Models*, NeurIPS 2024): a search over token ids in which every step is a span check
(:mod:`leakshield.text.span`), not an optimisation.

1. **Tokens** (Sec. 4.1): at each position t, the vocabulary's first-layer states LN(e_v + p_t) whose
   distance to the first attention layer's input span is under ``token_tolerance``; positions are read
   until one has no candidate (the longest sequence's end).
2. **Sequences**: a decoder (GPT-2) sees only its prefix, so sequences grow one token at a time (Sec.
   4.2): every kept prefix is extended by every candidate of the next position, and an extension stays
   if its new state after the first block's attention is in that layer's span (``sequence_tolerance``);
   a prefix ends at ``[SEP]`` or when no extension passes. An encoder (BERT) sees the whole sequence, so
   candidates are combined per length (a length ends where ``[SEP]`` is a candidate) and a combination is
   kept when all its positions pass (Sec. 4.3: exhaustive up to ``max_combinations``, then sampled).
   The ``batch`` kept sequences with the smallest worst distances are returned, finished ones (ending
   at ``[SEP]`` or at the last position read) before dead ends.
3. **Fill-in** (``fill_in``, on by default as in the authors' release): where fewer than ``batch``
   sequences pass — beyond the bound, or where the search runs short — the batch is filled with the
   best failing ones by mean context distance (:mod:`leakshield.text.dager_fill`). As in the reference,
   a decoder's failing prefixes grow only while some extension passes: where nothing passes past the
   first position (far past the bound: true states measured at 0.03–0.6 from the cut span, width 64, 4
   reviews) the fill-in has nothing and returns nothing, as the reference returns empty sentences.

Conditions under which the result is exact, each tested: two blocks or more (in a one-block classifier
every layer is the last, whose gradients see the one position the head reads); one FedSGD step (a FedAvg
update mixes states of several models); no dropout (the models here have none); fewer distinct (token,
position) states than the hidden size d less one (b·n < d − 1; a gradient of full rank means the bound
is broken, and the span is then cut to its d − ``beyond_margin`` strongest directions, so true tokens
are missed, and wrong sequences can pass: on a trained GPT-2 of width 256 at batch 16, 16 of 64 did; the
fill-in's sentences there are guesses, not recoveries); weights in general position (random ones are; a
trained model makes some states nearly dependent). Under known Gaussian noise
the rank stops at the noise floor; the tolerances stay, so noise costs recall.

Tolerances (float64 span of a float32 gradient, the distance of a unit state, from 0 to 1), measured on
2-block models with random weights and real reviews: true first-layer states lay within 6·10⁻⁴ of the
span (widths 32–128), false ones beyond 0.04 — but not on a GPT-2 with random weights (width 128,
4 reviews: 1,039 false (token, position) states within 10⁻⁵ of the span of 102 true ones, the next
false ones at 0.05–0.1; the sequence check removes them, and a test pins each position's candidates
to exactly those under ``token_tolerance``); a decoder's true contexts within 5·10⁻⁶, one wrong token
beyond 6·10⁻³; a BERT's true contexts within 1.7·10⁻⁴, and a mix of two reviews' tokens at their own
positions at 4.7·10⁻⁴. The context check's tolerance is ``sequence_tolerance`` or, without noise and
inside the bound, the span's rounding (:attr:`~leakshield.text.span.InputSpan.gap`, up to 10 ×
``sequence_tolerance``), whichever is larger: a badly conditioned span (a BERT at batch 2, gap 9·10⁻³)
then admits such mixes, which is why an encoder is exact at batch 1 only. Singular
values below ``rank_tolerance`` × the largest are float32 rounding (measured: 2·10⁻⁸ against 3·10⁻⁷
for the weakest true direction).

**Rounding** (fp16 quantization of the update) is not a tolerance problem that wider tolerances fix.
On the leaderboard's text model (BERT, width 64, 2 blocks, untrained, one review of 28 tokens) every
entry of the first layer's query and key gradients is below fp16's smallest normal number (6.1·10⁻⁵),
so each is rounded to a multiple of 2⁻²⁴: the rounding's singular values reach 6·10⁻⁴ of the stacked
gradient's largest while the true span's weakest directions sit at 10⁻⁵; a rank cut at the rounding
floor keeps 7 of 28 directions, and there true states lie farther from the span (up to 0.75) than false
ones (from 0.48). Known Gaussian noise does the same at the noise floor. So under known rounding or
noise the token step of a single sequence reads the embedding gradients instead
(:mod:`leakshield.text.embedding_rows`: the word row of a token equals its position's row, fp16 or not);
measured through this code: exact under fp16 on 20 of 20 reviews (BERT) and 10 of 10 (GPT-2), and
under Gaussian noise σ 10⁻³ on 10 of 10 on GPT-2 (position rows of norm 0.15) but 0 of 20 on BERT (its
rows, 2·10⁻³, are under the noise's 8·10⁻³). Batches of more than one sequence keep the span path.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from leakshield.errors import LeakshieldError
from leakshield.text.dager_fill import decoder_pool, encoder_pool, encoder_scores, fill
from leakshield.text.embedding_rows import embedding_row_tokens
from leakshield.text.models import TextClassifier
from leakshield.text.span import (
    InputSpan,
    attention_gradient,
    context_gradient,
    context_states,
    first_layer_states,
    input_span,
    span_distance,
)
from leakshield.text.tokenizer import PAD, SEP


@dataclass(frozen=True)
class DagerResult:
    """``ids``: the recovered sequences (batch × longest, ``[PAD]`` after each), those that passed the
    checks first, then the fill-in's (rows of ``[PAD]`` where even it finds too few); ``candidates``:
    the token ids that passed the span check at each position; ``rank``: the first layer's span
    dimension used; ``capped``: the b·n bound was broken."""

    ids: torch.Tensor
    candidates: list[list[int]]
    rank: int
    capped: bool


def token_candidates(
    model: TextClassifier, span: InputSpan, tolerance: float, max_length: int, most: int = 256
) -> list[list[int]]:
    """Per position (from 0 until one has none): the token ids whose first-layer state is in ``span``,
    nearest first, at most ``most`` of them."""
    out: list[list[int]] = []
    for position in range(max_length):
        distance = span_distance(span, first_layer_states(model, position))
        order = distance.argsort()[:most]
        ids = [int(i) for i in order[distance[order] < tolerance] if int(i) != PAD]
        if not ids:
            break
        out.append(ids)
    return out


def _grow_decoder(
    model: TextClassifier, span: InputSpan, candidates: list[list[int]], tolerance: float, max_prefixes: int
) -> list[tuple[list[int], float, bool]]:
    """Causal prefix extension: (sequence, its worst context distance, finished) per sequence of two
    tokens or more; finished: it ends at ``[SEP]`` or at the last position read (a prefix that no
    candidate extends is a dead end, ranked after every finished one)."""
    first = torch.tensor([[t] for t in candidates[0]])
    start = span_distance(span, context_states(model, first)[:, -1]).cpu()
    live = [([t], float(d)) for t, d in zip(candidates[0], start, strict=True) if d < tolerance]
    out: list[tuple[list[int], float, bool]] = []
    for position in range(1, len(candidates)):
        if not live:
            break
        grown = torch.tensor([[*p, t] for p, _ in live for t in candidates[position]])
        distance = torch.cat(
            [span_distance(span, context_states(model, chunk)[:, -1]).cpu() for chunk in grown.split(4096)]
        )
        passed: list[tuple[list[int], float]] = []
        for k, (prefix, worst) in enumerate(live):
            rows = range(k * len(candidates[position]), (k + 1) * len(candidates[position]))
            kept = [
                (grown[r].tolist(), max(worst, float(distance[r]))) for r in rows if distance[r] < tolerance
            ]
            if not kept and len(prefix) > 1:
                out.append((prefix, worst, False))
            passed += kept
        live = []
        for sequence, worst in sorted(passed, key=lambda item: item[1]):
            if sequence[-1] == SEP:
                out.append((sequence, worst, True))
            else:
                live.append((sequence, worst))
        live = live[:max_prefixes]
    return out + [(sequence, worst, True) for sequence, worst in live if len(sequence) > 1]


def _combine_encoder(
    model: TextClassifier,
    span: InputSpan,
    candidates: list[list[int]],
    tolerance: float,
    max_combinations: int,
    seed: int,
) -> list[tuple[list[int], float, bool]]:
    """Whole sequences per length (ending at a position where ``[SEP]`` passed: the tokenizer ends every
    sequence with it, a cut one included), each combination of the candidates between scored by its
    worst context distance; kept under ``tolerance``, all finished."""
    found: list[tuple[list[int], float, bool]] = []
    for _, chunk, distance in encoder_scores(model, span, candidates, max_combinations, seed):
        worst = distance.amax(1)
        found += [
            (chunk[k].tolist(), float(worst[k]), True) for k in torch.nonzero(worst < tolerance).flatten()
        ]
    return found


def search_sequences(
    exact: TextClassifier,
    context: InputSpan,
    candidates: list[list[int]],
    tolerance: float,
    *,
    max_prefixes: int,
    max_combinations: int,
    seed: int,
) -> list[tuple[list[int], float, bool]]:
    """The sequences whose context states pass ``context`` at ``tolerance``, built from the per-position
    ``candidates``: grown prefix by prefix in a decoder, combined per length in an encoder."""
    if not candidates:
        return []
    if exact.kind == "gpt2":
        return _grow_decoder(exact, context, candidates, tolerance, max_prefixes)
    return _combine_encoder(exact, context, candidates, tolerance, max_combinations, seed)


def sequence_ids(sequences: list[list[int]], batch: int) -> torch.Tensor:
    """``batch`` rows of token ids, ``[PAD]`` after each sequence and in rows no sequence fills."""
    width = max([len(s) for s in sequences] + [1])
    ids = torch.full((batch, width), PAD, dtype=torch.long)
    for row, sequence in enumerate(sequences):
        ids[row, : len(sequence)] = torch.tensor(sequence)
    return ids


def pick_sequences(found: list[tuple[list[int], float, bool]], batch: int) -> list[list[int]]:
    """The ``batch`` best distinct sequences: finished ones before dead ends, each by its worst context
    distance (every one passed the check; the reference keeps them all likewise)."""
    picked: list[list[int]] = []
    for sequence, _, _ in sorted(found, key=lambda item: (not item[2], item[1])):
        if sequence not in picked:
            picked.append(sequence)
    return picked[:batch]


def dager_attack(
    model: TextClassifier,
    gradient: Mapping[str, torch.Tensor],
    batch: int = 1,
    *,
    token_tolerance: float = 1e-2,
    sequence_tolerance: float = 1.5e-4,
    rank_tolerance: float = 1e-7,
    beyond_margin: int = 20,
    max_prefixes: int = 256,
    max_candidates: int = 256,
    max_combinations: int = 20_000,
    noise_std: float | None = None,
    rounding: float | None = None,
    embedding_step: bool = True,
    fill_in: bool = True,
    seed: int = 0,
) -> DagerResult:
    """Recover ``batch`` sequences from ``gradient`` (parameter name → one batch's mean loss gradient) of
    ``model``; the search runs on a float64 copy of the model. ``noise_std``, ``rounding``: the known
    Gaussian noise per entry and relative rounding of the released values (fp16: 2⁻¹¹), from the
    defense's public parameters; with either and ``embedding_step``, a single sequence's tokens are read
    off the embedding gradients (:mod:`leakshield.text.embedding_rows`) — the span check cannot see
    through them (module docstring, "Rounding"). ``fill_in``: where fewer than ``batch`` sequences pass,
    fill the batch with the best failing ones as the reference does (:mod:`leakshield.text.dager_fill`);
    off, only sequences that passed are returned."""
    if len(model.backbone.h if model.kind == "gpt2" else model.backbone.encoder.layer) < 2:
        raise LeakshieldError(
            "DAGER needs a model of two blocks or more: a one-block classifier's gradients see only the "
            "position its head reads"
        )
    if batch == 1 and embedding_step and (noise_std is not None or rounding is not None):
        tokens = embedding_row_tokens(model, gradient, rounding=rounding, noise_std=noise_std)
        if tokens is not None and len(tokens) >= 3:  # [CLS], a token, [SEP]; fewer: buried, use the span
            return DagerResult(torch.tensor([tokens]), [[t] for t in tokens], len(set(tokens)), False)
    exact = copy.deepcopy(model).double().eval()
    stacked, scale = attention_gradient(exact, gradient)
    first = input_span(
        stacked, rank_tolerance, beyond_margin, None if noise_std is None else noise_std * scale
    )
    context = input_span(context_gradient(exact, gradient), rank_tolerance, beyond_margin, noise_std)
    candidates = token_candidates(exact, first, token_tolerance, model.max_length, max_candidates)
    tolerance = sequence_tolerance
    if noise_std is None and not context.capped:  # the span's own rounding, up to 10 × the tolerance
        tolerance = max(tolerance, min(context.gap, 10 * sequence_tolerance))
    found = search_sequences(exact, context, candidates, tolerance, max_prefixes=max_prefixes,
                             max_combinations=max_combinations, seed=seed)  # fmt: skip
    picked = pick_sequences(found, batch)
    if fill_in and len(picked) < batch and candidates:
        if exact.kind == "gpt2":
            pool = decoder_pool(exact, context, candidates, tolerance, batch, max_prefixes)
        else:
            pool = encoder_pool(exact, context, candidates, tolerance, batch, max_combinations, seed, picked)
        picked = fill(picked, pool, batch)
    return DagerResult(sequence_ids(picked, batch), candidates, first.rank, first.capped)
