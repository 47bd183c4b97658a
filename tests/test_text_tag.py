"""TAG on a small transformer, what an update leaks for free (length, label), and the text scores."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from leakshield.errors import LeakshieldError
from leakshield.text import deduplicated, read_rotten_tomatoes_csv, split_by_group, train_tokenizer
from leakshield.text.models import TextClassifier
from leakshield.text.scores import matched, no_information_text, paired_scores, text_scores, token_accuracy
from leakshield.text.tag import leaked_label, leaked_length, tag_attack
from leakshield.text.tokenizer import CLS, PAD, SEP


@pytest.fixture(scope="module")
def setting(rotten_tomatoes_csv):
    corpus, _ = deduplicated(read_rotten_tomatoes_csv(rotten_tomatoes_csv))
    splits = split_by_group(corpus, 0.2, 0.2, seed=0)
    tokenizer = train_tokenizer(splits.public.texts, "wordpiece", 2000)
    return splits, tokenizer


def _update(model, ids, labels):
    loss = F.cross_entropy(model(ids), labels)
    names = [n for n, _ in model.named_parameters()]
    return dict(zip(names, torch.autograd.grad(loss, list(model.parameters())), strict=True))


@pytest.mark.parametrize("kind", ["bert", "gpt2"])
def test_an_update_leaks_the_longest_length_and_a_single_label(setting, kind):
    splits, tokenizer = setting
    model = TextClassifier(kind, tokenizer.vocab_size, 32, 2, width=32, heads=2).eval()
    ids = tokenizer.encode(splits.train.texts[:4], 32)
    labels = torch.tensor(splits.train.labels[:4])
    lengths = (ids != PAD).sum(1)
    assert leaked_length(model, _update(model, ids, labels)) == int(lengths.max())
    for k in range(4):
        one = _update(model, ids[k : k + 1], labels[k : k + 1])
        assert leaked_length(model, one) == int(lengths[k])
        assert leaked_label(model, one) == int(labels[k])


def test_tag_recovers_a_short_review_far_above_the_no_information_guess(setting):
    """A 2-layer BERT of width 64, untrained, one 10-token review: TAG at 1,000 steps recovered it
    exactly (measured, 10 s); at the 150 steps here it read '##ithful three - hour cinema master
    class.' (ROUGE-1 0.83 against 0.20 for the public split's most frequent words, ", the a. of and - '").
    Bound: ROUGE-1 above 0.5 and 0.3 above the guess."""
    splits, tokenizer = setting
    model = TextClassifier("bert", tokenizer.vocab_size, 32, 2, width=64, heads=2).eval()
    ids = tokenizer.encode(splits.train.texts[:1], 32)
    result = tag_attack(model, _update(model, ids, torch.tensor(splits.train.labels[:1])), iterations=150)
    truth, guess = tokenizer.decode(ids[0]), tokenizer.decode(result.ids[0])
    public = tokenizer.encode(splits.public.texts, 32)
    floor = text_scores([no_information_text(public, int((ids != PAD).sum()), tokenizer)], [truth])[0][
        "rouge1"
    ]
    score = text_scores([guess], [truth])[0]["rouge1"]
    assert score > 0.5 and score > floor + 0.3, (guess, score, floor)
    assert (
        result.ids[0, 0] == CLS
        and result.ids[0, -1] == SEP
        and result.length == ids.shape[1] - (ids == PAD).sum()
    )


def test_a_batch_needs_its_labels(setting):
    splits, tokenizer = setting
    model = TextClassifier("bert", tokenizer.vocab_size, 32, 2, width=16, heads=2).eval()
    ids = tokenizer.encode(splits.train.texts[:2], 32)
    update = _update(model, ids, torch.tensor(splits.train.labels[:2]))
    with pytest.raises(LeakshieldError, match="pass its labels"):
        tag_attack(model, update, batch=2, iterations=1)
    result = tag_attack(model, update, batch=2, labels=torch.tensor(splits.train.labels[:2]), iterations=2)
    assert result.ids.shape == (2, leaked_length(model, update))


def test_reconstructions_are_paired_with_the_true_texts_before_scoring():
    truth = ["the film is a delight", "dull and long", "a quiet masterpiece"]
    predicted = ["dull and long", "a quiet masterpiece", "the film is a delight"]
    assert matched(predicted, truth) == [2, 0, 1]
    assert [k for k, _ in paired_scores(predicted, truth)] == [2, 0, 1]  # the index beside the scores
    scores = text_scores(predicted, truth)
    assert all(s["rouge1"] == s["rouge2"] == s["rougeL"] == s["exact"] == 1.0 for s in scores)
    half = text_scores(["the film is long"], ["the film is a delight"])[0]
    assert half["rouge1"] == pytest.approx(2 * (3 / 4) * (3 / 5) / (3 / 4 + 3 / 5)) and half["exact"] == 0.0
    with pytest.raises(LeakshieldError, match="2 reconstructed texts for 3"):
        matched(predicted[:2], truth)


def test_token_accuracy_counts_words_at_their_positions():
    truth = torch.tensor([[CLS, 10, 11, 12, SEP, PAD]])
    assert token_accuracy(torch.tensor([[CLS, 10, 99, 12, SEP, PAD]]), truth) == pytest.approx(2 / 3)
    assert token_accuracy(truth, truth) == 1.0
