"""The server's tokenizer: merges learned deterministically, trained on the public split only, ids laid
out for the models, and cached by the texts it saw."""

from __future__ import annotations

import json
import sys
from itertools import pairwise

import pytest

from leakshield.artifacts import ArtifactCache
from leakshield.errors import LeakshieldError
from leakshield.text import (
    deduplicated,
    public_tokenizer,
    read_rotten_tomatoes_csv,
    split_by_group,
    train_tokenizer,
)
from leakshield.text import tokenizer as tokenizer_module
from leakshield.text.bpe import learn_bpe
from leakshield.text.models import TextClassifier
from leakshield.text.scores import text_scores
from leakshield.text.tokenizer import CLS, PAD, SEP, UNK


def test_merges_take_the_most_frequent_pair_and_the_smallest_on_a_tie():
    """Worked by hand: 'low' ×5, 'lower' ×2, 'newest' ×6, 'widest' ×3. ('##e', '##s') and ('##s', '##t')
    both occur 9 times: the smaller pair goes first; then '##est' (9); ('##o', '##w') and ('l', '##o')
    tie at 7, and '#' sorts before 'l'."""
    alphabet, merges = learn_bpe({"low": 5, "lower": 2, "newest": 6, "widest": 3}, vocab_size=100)
    assert alphabet == sorted(["l", "n", "w", "##o", "##w", "##e", "##r", "##s", "##t", "##i", "##d"])
    assert merges[:4] == [("##e", "##s"), ("##es", "##t"), ("##o", "##w"), ("l", "##ow")]


def test_merges_stop_at_the_vocabulary_size_and_at_pairs_seen_once():
    counts = {"low": 5, "lower": 2, "newest": 6, "widest": 3}
    alphabet, merges = learn_bpe(counts, vocab_size=14, reserved=2)
    assert len(alphabet) + len(merges) + 2 == 14
    _, frequent = learn_bpe({**counts, "zq": 1}, vocab_size=1000, min_frequency=2)
    _, with_singles = learn_bpe({**counts, "zq": 1}, vocab_size=1000, min_frequency=1)
    assert ("z", "##q") not in frequent and with_singles == [*frequent, ("z", "##q")]


@pytest.fixture(scope="module")
def public_texts(rotten_tomatoes_csv) -> tuple[str, ...]:
    corpus, _ = deduplicated(read_rotten_tomatoes_csv(rotten_tomatoes_csv))
    return split_by_group(corpus, 0.2, 0.2, seed=0).public.texts


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_training_twice_gives_the_same_tokenizer(public_texts, kind):
    """``tokenizers``' own trainers moved 158 of 2,000 ids between two trainings on these texts."""
    first = train_tokenizer(public_texts, kind, 600)
    assert first.vocab_size == 600
    assert train_tokenizer(public_texts, kind, 600).to_json() == first.to_json()
    vocab = json.loads(first.to_json())["model"]["vocab"]
    assert [vocab[t] for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]")] == [PAD, UNK, CLS, SEP]


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_ids_frame_the_text_and_decode_back(public_texts, kind):
    tok = train_tokenizer(public_texts, kind, 2000)
    ids = tok.encode(["A film of quiet, Haunting beauty.", "Dull."], max_length=16)
    assert ids.shape == (2, 16) and ids.dtype.is_floating_point is False
    for row in ids:
        length = int((row != PAD).sum())
        assert row[0] == CLS and row[length - 1] == SEP and (row[length:] == PAD).all()
    assert tok.decode(ids[0]) == "a film of quiet, haunting beauty."
    cut = tok.encode(["one two three four five six seven"], max_length=5)[0]
    assert cut.tolist()[0] == CLS and cut.tolist()[-1] == SEP and tok.decode(cut) == "one two three"
    assert UNK in tok.encode(["\u4e2d"], max_length=4)[0].tolist()  # a character no public text has
    with pytest.raises(LeakshieldError, match="max_length 2"):
        tok.encode(["x"], max_length=2)


def test_the_public_tokenizer_is_cached_by_the_texts_it_saw(public_texts, tmp_path, monkeypatch):
    cache = ArtifactCache(tmp_path)
    first = public_tokenizer(public_texts, "wordpiece", 500, cache=cache)

    def refuse(*args, **kwargs):
        raise AssertionError("trained again")

    monkeypatch.setattr(tokenizer_module, "train_tokenizer", refuse)
    assert public_tokenizer(public_texts, "wordpiece", 500, cache=cache).to_json() == first.to_json()
    with pytest.raises(AssertionError, match="trained again"):
        public_tokenizer(public_texts[:-1], "wordpiece", 500, cache=cache)
    with pytest.raises(AssertionError, match="trained again"):
        public_tokenizer(public_texts, "wordpiece", 501, cache=cache)


def test_without_the_text_extra_the_error_names_it(monkeypatch):
    for module in ("tokenizers", "transformers", "rouge_score.rouge_scorer"):  # None: "not installed"
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(LeakshieldError, match=r"pip install 'leakshield\[text\]'"):
        train_tokenizer(["a b"], "wordpiece", 10)
    with pytest.raises(LeakshieldError, match=r"pip install 'leakshield\[text\]'"):
        TextClassifier("bert", 10, 8, 2)
    with pytest.raises(LeakshieldError, match=r"pip install 'leakshield\[text\]'"):
        text_scores(["a"], ["a"])


def test_settings_outside_the_allowed_values_are_one_line_errors():
    with pytest.raises(LeakshieldError, match="expected 'wordpiece' or 'bpe'"):
        train_tokenizer(["a"], "unigram", 100)  # type: ignore[arg-type]
    with pytest.raises(LeakshieldError, match="must exceed the 4 special tokens"):
        train_tokenizer(["a"], "bpe", 4)


def test_the_bpe_model_cuts_words_as_the_learned_merges_replay(public_texts):
    """tokenizers' BPE model, loaded with the learned merges, must cut every word as replaying the merges
    in order does (the learner and the model agree on '##' pieces)."""
    from collections import Counter

    from leakshield.text.bpe import PREFIX

    tok = train_tokenizer(public_texts, "bpe", 1500)
    merges = [
        tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
        for m in json.loads(tok.to_json())["model"]["merges"]
    ]
    rank = {pair: k for k, pair in enumerate(merges)}
    words = Counter(
        w for text in public_texts[:400] for w in text.lower().split() if w.isascii() and w.isalpha()
    )
    for word in sorted(words)[:300]:
        symbols = [word[0], *(PREFIX + c for c in word[1:])]
        while True:
            pairs = [(rank.get((a, b), len(rank)), k) for k, (a, b) in enumerate(pairwise(symbols))]
            best, k = min(pairs, default=(len(rank), 0))
            if best == len(rank):
                break
            symbols[k : k + 2] = [symbols[k] + symbols[k + 1][len(PREFIX) :]]
        assert tok.tokens(tok.encode([word], 40)[0][1:-1][: len(symbols)]) == symbols, word


def test_a_review_that_spells_a_special_token_stays_text(public_texts):
    tok = train_tokenizer(public_texts, "wordpiece", 1000)
    ids = tok.encode(["great [SEP] film [PAD] end"], 16)[0].tolist()
    inner = ids[1 : ids.index(SEP)]
    assert PAD not in inner and SEP not in inner and CLS not in inner
    assert tok.decode(ids) == "great sep film pad end"  # no public text has a bracket: [UNK], dropped


def test_a_vocabulary_smaller_than_the_alphabet_is_refused():
    with pytest.raises(LeakshieldError, match="distinct characters"):
        train_tokenizer(["hello world", "hello there"], "wordpiece", 6)
    tok = train_tokenizer(["hello world", "hello there"] * 3, "bpe", 20)
    assert tok.vocab_size <= 20
