"""DAGER's fill-in on tiny inputs: the ranking by mean distance, the distinctness rule and the fill."""

from __future__ import annotations

import torch

from leakshield.text.dager_fill import DISTINCT, agreement, best_distinct, decoder_pool, encoder_pool, fill
from leakshield.text.models import TextClassifier
from leakshield.text.span import InputSpan, context_states


def test_agreement_counts_aligned_equal_positions():
    assert agreement([1, 2, 3, 4], [1, 9, 3]) == 2
    assert agreement([], [1]) == 0


def test_best_distinct_ranks_by_mean_and_drops_the_alike():
    """[1, 2, 3, 5] agrees with the best at 3 of 4 positions (≥ 0.7 × 4): dropped; the rest by mean."""
    assert DISTINCT == 0.7
    scored = [([6, 7, 8, 9], 0.3), ([1, 2, 3, 5], 0.2), ([1, 2, 3, 4], 0.1), ([6, 7, 0, 0], 0.4)]
    assert best_distinct(scored, 3, 4) == [([1, 2, 3, 4], 0.1), ([6, 7, 8, 9], 0.3), ([6, 7, 0, 0], 0.4)]
    assert best_distinct(scored, 1, 4) == [([1, 2, 3, 4], 0.1)]
    # judged at a longer length, agreeing at 3 positions is no longer alike
    assert [s for s, _ in best_distinct(scored, 2, 5)] == [[1, 2, 3, 4], [1, 2, 3, 5]]


def test_fill_puts_the_exact_first_and_fills_with_the_best_distinct_failing():
    exact = [[1, 2, 3, 4]]
    pool = [([1, 2, 3, 9], 0.01), ([5, 6, 7, 8], 0.2), ([5, 6, 7, 0], 0.1), ([9, 9, 9, 9], 0.5)]
    # [1, 2, 3, 9] is alike the exact one; [5, 6, 7, 8] alike the first pick (3 ≥ 0.7 × the longest, 4)
    assert fill(exact, pool, 3) == [[1, 2, 3, 4], [5, 6, 7, 0], [9, 9, 9, 9]]
    assert fill(exact, pool, 1) == exact
    assert fill([], pool, 2) == [[1, 2, 3, 9], [5, 6, 7, 0]]
    # every candidate dropped: the pick stops short of the batch (the reference repeats one)
    assert fill(exact, [([1, 2, 3, 0], 0.1)], 3) == exact
    assert fill(exact, [], 3) == exact


def test_a_short_prefix_is_alike_an_exact_sequence_it_starts():
    """Against an exact sequence the shorter length counts: a prefix of it is alike and dropped."""
    assert fill([[1, 2, 3, 4, 5, 6]], [([1, 2, 3], 0.0), ([7, 8, 9], 0.1)], 2) == [
        [1, 2, 3, 4, 5, 6],
        [7, 8, 9],
    ]


def _span_of(model: TextClassifier, ids: list[int]) -> InputSpan:
    """The span of ``ids``'s own context states: that sequence lies in it at every position."""
    states = context_states(model, torch.tensor([ids]))[0].T
    basis, _ = torch.linalg.qr(states)
    return InputSpan(basis, basis.shape[1])


def test_the_decoder_pool_ranks_by_mean_distance_and_stops_where_nothing_passes():
    """A tiny GPT-2 and a span holding [CLS] 6 8's contexts: [CLS] 6 and [CLS] 6 8 pass, so each length
    keeps its failing extensions (the previous length's beam grown too), the best by mean first; at
    tolerance 0 nothing passes past [CLS] and the search stops with an empty pool (the reference drops
    that length's beam)."""
    model = TextClassifier("gpt2", 50, 8, 2, width=16, heads=2, seed=0).double().eval()
    span = _span_of(model, [2, 6, 8])
    candidates = [[2], [5, 6], [7, 8]]
    pool = decoder_pool(model, span, candidates, 1e-6, 2, 16)
    assert [s for s, _ in pool if len(s) == 2] == [[2, 5]]
    length_three = [s for s, _ in pool if len(s) == 3]
    assert length_three[0] == [2, 6, 7] and len(length_three) == 2 and [2, 6, 8] not in length_three
    means = [m for s, m in pool if len(s) == 3]
    assert means == sorted(means) and all(m > 1e-9 for _, m in pool)
    assert decoder_pool(model, span, candidates, 0.0, 2, 16) == []


def test_the_encoder_pool_ranks_per_length_and_leaves_out_the_exact_tokens():
    """A tiny BERT and a span holding [CLS] 6 8 [SEP]'s states: that combination ranks first; with
    [CLS] 6 8 [SEP] exact, its tokens leave the positions that keep another (non-overlap)."""
    model = TextClassifier("bert", 50, 8, 2, width=16, heads=2, seed=0).double().eval()
    span = _span_of(model, [2, 6, 8, 3])
    candidates = [[2], [5, 6], [7, 8], [3]]
    pool = encoder_pool(model, span, candidates, 0.0, 2, 100, 0, [])
    assert [s for s, _ in pool] == [[2, 6, 8, 3], [2, 5, 7, 3]]  # the other two agree at 3 of 4
    assert [s for s, _ in encoder_pool(model, span, candidates, 0.0, 2, 100, 0, [[2, 6, 8, 3]])] == [
        [2, 5, 7, 3]
    ]
