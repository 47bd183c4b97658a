"""Small transformers built from configs, and the bag-of-words leak of their word embeddings."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from leakshield.text import deduplicated, read_rotten_tomatoes_csv, split_by_group, train_tokenizer
from leakshield.text.bag_of_words import bag_of_words, embedding_parameter
from leakshield.text.models import TextClassifier
from leakshield.text.tokenizer import CLS, PAD, SEP

KINDS = ["bert", "gpt2"]


@pytest.fixture(scope="module")
def tokenized(rotten_tomatoes_csv):
    corpus, _ = deduplicated(read_rotten_tomatoes_csv(rotten_tomatoes_csv))
    splits = split_by_group(corpus, 0.2, 0.2, seed=0)
    tokenizer = train_tokenizer(splits.public.texts, "wordpiece", 1000)
    ids = tokenizer.encode(splits.train.texts[:16], max_length=32)
    return ids, torch.tensor(splits.train.labels[:16]), tokenizer.vocab_size


@pytest.mark.parametrize("kind", KINDS)
def test_a_model_is_its_seed_and_ignores_padding(kind):
    model = TextClassifier(kind, 100, 12, 3, width=16, heads=2, seed=0).eval()
    same = TextClassifier(kind, 100, 12, 3, width=16, heads=2, seed=0)
    other = TextClassifier(kind, 100, 12, 3, width=16, heads=2, seed=1)
    pairs = list(zip(model.parameters(), same.parameters(), other.parameters(), strict=True))
    assert all(torch.equal(a, b) for a, b, _ in pairs) and not all(torch.equal(a, c) for a, _, c in pairs)
    short = torch.tensor([[CLS, 7, 8, 9, SEP, PAD]])
    padded = torch.tensor([[CLS, 7, 8, 9, SEP, PAD, PAD, PAD, PAD, PAD]])
    assert model(short).shape == (1, 3)
    assert torch.allclose(model(short), model(padded), atol=1e-5)
    embeddings = model.word_embeddings(short)
    assert torch.equal(model.forward_embeddings(embeddings, short != PAD), model(short))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("batch", [1, 4, 16])
def test_the_bag_of_words_is_the_batch_tokens_on_an_untied_embedding(tokenized, kind, batch):
    ids, labels, vocab = tokenized
    model = TextClassifier(kind, vocab, 32, 2, width=32, heads=2)
    loss = F.cross_entropy(model(ids[:batch]), labels[:batch])
    name = embedding_parameter(model)
    gradient = torch.autograd.grad(loss, dict(model.named_parameters())[name])[0]
    truth = set(ids[:batch].flatten().tolist()) - {PAD}
    assert set(bag_of_words(gradient).tolist()) == truth


def test_with_a_tied_language_model_head_the_bag_is_the_whole_vocabulary(tokenized):
    from transformers import GPT2Config, GPT2LMHeadModel

    ids, _, vocab = tokenized
    config = GPT2Config(vocab_size=vocab, n_positions=32, n_embd=32, n_layer=1, n_head=2,
                        bos_token_id=CLS, eos_token_id=SEP, pad_token_id=PAD)  # fmt: skip
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    assert model.lm_head.weight is model.transformer.wte.weight
    loss = model(input_ids=ids[:1], labels=ids[:1]).loss
    gradient = torch.autograd.grad(loss, model.transformer.wte.weight)[0]
    assert len(bag_of_words(gradient)) == vocab


def test_settings_outside_the_allowed_values_are_one_line_errors():
    from leakshield.errors import LeakshieldError

    with pytest.raises(LeakshieldError, match="expected 'bert' or 'gpt2'"):
        TextClassifier("lstm", 10, 8, 2)  # type: ignore[arg-type]
    with pytest.raises(LeakshieldError, match="multiple of heads"):
        TextClassifier("bert", 10, 8, 2, width=10, heads=3)


def test_per_sample_gradients_of_a_transformer_are_each_samples_own():
    """vmap cannot batch transformers' mask code: the per-sample gradients (DP-SGD's clipping) go one
    sample after another and equal each sample's own gradient."""
    from leakshield.gradients import per_sample_gradients

    model = TextClassifier("bert", 60, 8, 2, width=16, heads=2).eval()
    ids = torch.tensor(
        [[CLS, 10, 11, 12, SEP, PAD], [CLS, 40, 41, SEP, PAD, PAD], [CLS, 7, SEP, PAD, PAD, PAD]]
    )
    labels = torch.tensor([0, 1, 1])
    each = per_sample_gradients(model, ids, labels)
    for k in range(3):
        own = torch.autograd.grad(
            F.cross_entropy(model(ids[k : k + 1]), labels[k : k + 1]), list(model.parameters())
        )
        for (name, _), g in zip(model.named_parameters(), own, strict=True):
            assert torch.allclose(each[name][k], g, atol=1e-6), name


def test_dp_sgd_clips_and_noises_a_transformers_update():
    from leakshield.data.types import DatasetInfo, ImageSet
    from leakshield.defenses import DefensePipeline
    from leakshield.defenses.base import ClientContext

    model = TextClassifier("bert", 60, 8, 2, width=16, heads=2).eval()
    ids = torch.tensor([[CLS, 10, 11, 12, SEP, PAD], [CLS, 40, 41, SEP, PAD, PAD]])
    labels = torch.tensor([0, 1])
    placeholder = ImageSet(torch.zeros(2, 1, 1, 1), labels)  # the defense reads no pixels
    context = ClientContext(0, 0, placeholder, DatasetInfo("text", (1, 1, 1), 2, (0.0,), (1.0,)),
                            torch.Generator().manual_seed(0)).at_step(placeholder, 0)  # fmt: skip
    clipped = DefensePipeline.from_config(
        [{"name": "dpsgd", "params": {"noise_multiplier": 0.0, "clip": 0.01}}]
    )
    update = clipped.gradient(model, ids, labels, context)
    norm = torch.sqrt(sum((g**2).sum() for g in update.values()))
    assert float(norm) <= 0.01 + 1e-6
    noisy = DefensePipeline.from_config(
        [{"name": "dpsgd", "params": {"noise_multiplier": 1.0, "clip": 0.01}}]
    )
    word = noisy.gradient(model, ids, labels, context)[embedding_parameter(model)]
    assert len(bag_of_words(word)) == 60  # noise on every row: the bag of words is gone


def test_under_known_noise_the_bag_keeps_the_rows_noise_alone_does_not_explain():
    """Rows of pure noise (σ = 0.01) against rows carrying a signal of norm 0.2, at widths 16 and 64: the
    χ² test keeps the signal rows and at most one noise row (a noise row passes in 1 % of matrices: at
    width 64 this draw has one, row 1919); any non-zero row would keep them all."""
    for width in (16, 64):
        gen = torch.Generator().manual_seed(width)
        gradient = 0.01 * torch.randn(2000, width, generator=gen)
        signal = torch.tensor([3, 50, 700])
        gradient[signal] += 0.2 * F.normalize(torch.randn(3, width, generator=gen), dim=1)
        found = set(bag_of_words(gradient, noise_std=0.01).tolist())
        assert set(signal.tolist()) <= found and len(found) <= 4
        assert len(bag_of_words(gradient)) == 2000


def test_noise_alone_passes_the_test_at_its_stated_rate():
    """2,000 rows × 200 matrices of pure noise at width 16: at a false-row rate of 1 % per matrix, about
    2 matrices show a row. Bound: at most 8 (binomial, 200 × 0.01: P(≥ 8) < 1e-3)."""
    from leakshield.text.bag_of_words import rows_with_signal

    gen = torch.Generator().manual_seed(0)
    passed = sum(bool(len(rows_with_signal(torch.randn(2000, 16, generator=gen), 1.0))) for _ in range(200))
    assert passed <= 8
