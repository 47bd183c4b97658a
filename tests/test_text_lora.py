"""LoRA federations: the adapters peft injects and what a LoRA update shares, DAGER on the adapters'
A-gradients (exact inside its rank bound, nothing false beyond it), FedRand's messages, and a LoRA model
through a text grid."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

for module in ("transformers", "tokenizers", "rouge_score", "peft"):
    pytest.importorskip(module)

from leakshield.errors import ConfigError, LeakshieldError  # noqa: E402
from leakshield.text import deduplicated, read_rotten_tomatoes_csv, split_by_group, train_tokenizer  # noqa: E402
from leakshield.text.backbone import pretrained_model  # noqa: E402
from leakshield.text.dager_lora import WIDTH_MARGIN, leaked_lora_length, lora_dager_attack  # noqa: E402
from leakshield.text.dataset import TokenSet  # noqa: E402
from leakshield.text.fedrand import AdapterFederation  # noqa: E402
from leakshield.text.lora import AdapterClassifier, lora_names  # noqa: E402
from leakshield.text.models import TextClassifier  # noqa: E402
from leakshield.text.tokenizer import PAD  # noqa: E402
from leakshield.text_grid.config import parse_text_config  # noqa: E402


@pytest.fixture(scope="module")
def reviews(rotten_tomatoes_csv):
    corpus, _ = deduplicated(read_rotten_tomatoes_csv(rotten_tomatoes_csv))
    splits = split_by_group(corpus, 0.2, 0.2, seed=0)
    tokenizer = train_tokenizer(splits.public.texts, "wordpiece", 2000)
    public = TokenSet(tokenizer.encode(splits.public.texts, 32), torch.tensor(splits.public.labels))
    train = TokenSet(
        tokenizer.encode(splits.train.texts[:1000], 32), torch.tensor(splits.train.labels[:1000])
    )
    return tokenizer, public, train


@pytest.fixture(scope="module")
def backbone(reviews, tmp_path_factory):
    """BERT (width 64, 2 blocks) pretrained 2 epochs on the 2,581 public reviews, as in
    benchmarks/text_lora.yaml."""
    tokenizer, public, _ = reviews
    from leakshield.artifacts import ArtifactCache

    fresh = TextClassifier("bert", tokenizer.vocab_size, 32, 2, width=64, heads=2, seed=3)
    cache = ArtifactCache(tmp_path_factory.mktemp("cache"))
    return pretrained_model(fresh, public.x, public.y, epochs=2, seed=3, cache=cache)


def _trained_adapters(
    base: TextClassifier, train: TokenSet, rank: int, targets: str = "attention"
) -> AdapterClassifier:
    """Adapters after 24 Adam steps (10⁻³) on minibatches of 32 of the first 800 training reviews (B ≠ 0,
    as after a federated round); reviews from 900 on are the victims."""
    model = AdapterClassifier(base, rank=rank, targets=targets, seed=1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(24):
        rows = torch.arange(step * 32, step * 32 + 32) % 800
        loss = F.cross_entropy(model(train.x[rows]), train.y[rows])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def _gradient(model, ids, labels):
    loss = F.cross_entropy(model(ids), labels)
    names, params = zip(*model.named_parameters(), strict=True)
    return dict(zip(names, torch.autograd.grad(loss, params), strict=True))


def _states(ids: torch.Tensor) -> int:
    return len({(int(t), p) for row in ids for p, t in enumerate(row) if t != PAD})


def _rows(ids: torch.Tensor) -> set[tuple[int, ...]]:
    return {tuple(int(t) for t in row if t != PAD) for row in ids} - {()}


def test_adapters_share_only_themselves_and_start_as_the_backbone(backbone, reviews):
    """B starts at zero (the adapted model computes what the backbone does); the update holds A, B
    and the head only; no gradient is computed for the frozen weights."""
    _, _, train = reviews
    model = AdapterClassifier(backbone, rank=4, seed=0)
    ids = train.x[:5]
    torch.testing.assert_close(model(ids), backbone(ids))
    names = [n for n, _ in model.named_parameters()]
    assert names and all(".lora_" in n or n.startswith(("head.", "backbone.pooler.")) for n in names)
    assert sum(".lora_A" in n for n in names) == 6  # query, key, value × 2 blocks
    every = dict(torch.nn.Module.named_parameters(model))
    frozen = {k for k in every if ".lora_" not in k and "pooler" not in k and not k.startswith("head.")}
    assert frozen and frozen.isdisjoint(names)
    F.cross_entropy(model(ids), train.y[:5]).backward()
    assert all(every[k].grad is None for k in frozen)  # no gradient is even computed for them
    assert model.count_shared() < sum(p.numel() for p in backbone.parameters()) / 10
    with pytest.raises(LeakshieldError, match="rank"):
        AdapterClassifier(backbone, rank=0)


@pytest.mark.parametrize("rank", [16, 64])
def test_dager_reads_a_review_exactly_from_a_lora_update_inside_its_bound(backbone, reviews, rank):
    """Batch 1 on the pretrained, frozen BERT with trained adapters, 20 reviews inside the bound (3r
    stacked rows, the width less its margin): at least 18 come back token for token (measured: 19 at
    rank 16, 20 at rank 64) and the length with them; a miss is a review cut short where a weak
    position fell under float32's rounding, never a false token."""
    _, _, train = reviews
    model = _trained_adapters(backbone, train, rank)
    exact = 0
    for k in range(900, 920):
        ids, labels = train.x[k : k + 1], train.y[k : k + 1]
        assert _states(ids) < min(3 * rank - 1, 64 - WIDTH_MARGIN)
        gradient = _gradient(model, ids, labels)
        result = lora_dager_attack(model, gradient, 1)
        assert not result.capped
        got, want = [int(t) for t in result.ids[0] if t != PAD], [int(t) for t in ids[0] if t != PAD]
        assert got == want[: len(got)]
        exact += got == want
        if got == want:
            assert leaked_lora_length(model, gradient) == len(want)
    assert exact >= 18


def test_beyond_the_bound_it_returns_nothing_false(backbone, reviews):
    """Rank 2 (6 stacked rows) against reviews of 6 states or more: capped, no token reported; and the first
    update of fresh adapters (B = 0, the A-gradient zero) reads nothing."""
    _, _, train = reviews
    model = _trained_adapters(backbone, train, 2)
    for k in range(900, 905):
        ids = train.x[k : k + 1]
        assert _states(ids) >= 6
        result = lora_dager_attack(model, _gradient(model, ids, train.y[k : k + 1]), 1)
        assert result.capped and not result.candidates and not _rows(result.ids)
    near = _trained_adapters(backbone, train, 4)  # 12 stacked rows: reviews of 14 to 18 states
    rows = [k for k in range(900, 1000) if 14 <= _states(train.x[k : k + 1]) <= 18][:3]
    assert len(rows) == 3
    for k in rows:
        result = lora_dager_attack(near, _gradient(near, train.x[k : k + 1], train.y[k : k + 1]), 1)
        assert result.capped and not _rows(result.ids)
    fresh = AdapterClassifier(backbone, rank=16, seed=0)
    result = lora_dager_attack(fresh, _gradient(fresh, train.x[900:901], train.y[900:901]), 1)
    assert not _rows(result.ids) and not result.candidates


@pytest.mark.parametrize(("rank", "least"), [(2, 8), (4, 16), (8, 26)])
def test_well_past_the_bound_no_false_token(backbone, reviews, rank, least):
    """Reviews of ``least`` states or more at a rank whose bound (3r − 1, judged at 10⁻⁷) they pass: the
    result is capped or, where the weakest directions fell under the cut, read on a strict part of the
    span; either way no token is reported that is not the review's own at its position."""
    _, _, train = reviews
    model = _trained_adapters(backbone, train, rank)
    rows = [k for k in range(900, 1000) if _states(train.x[k : k + 1]) >= max(least, 3 * rank - 1)][:5]
    assert len(rows) == 5
    for k in rows:
        ids = train.x[k : k + 1]
        result = lora_dager_attack(model, _gradient(model, ids, train.y[k : k + 1]), 1)
        got, want = [int(t) for t in result.ids[0] if t != PAD], [int(t) for t in ids[0] if t != PAD]
        assert all(position < len(want) and token == want[position] for position, token in enumerate(got))
        for position, passed in enumerate(result.candidates):
            assert position < len(want) and want[position] in passed[:1]


def test_a_fedavg_update_reads_nothing_false(backbone, reviews):
    """A FedAvg message of 5 SGD steps on one review is a float32 parameter difference whose rounding
    buries the weak true directions: whatever is read, no false token is (in exact arithmetic the frozen
    first-layer states would be read)."""
    _, _, train = reviews
    model = _trained_adapters(backbone, train, 16)
    for k in (900, 901):
        ids, labels = train.x[k : k + 1], train.y[k : k + 1]
        worker = copy.deepcopy(model)
        before = {n: p.detach().clone() for n, p in worker.named_parameters()}
        optimizer = torch.optim.SGD(worker.parameters(), lr=0.05)
        for _ in range(5):
            optimizer.zero_grad()
            F.cross_entropy(worker(ids), labels).backward()
            optimizer.step()
        update = {n: (before[n] - p.detach()) / (0.05 * 5) for n, p in worker.named_parameters()}
        result = lora_dager_attack(model, update, 1)
        got, want = [int(t) for t in result.ids[0] if t != PAD], [int(t) for t in ids[0] if t != PAD]
        assert got == want[: len(got)]


def test_feed_forward_adapters_order_a_batch_of_two(reviews, backbone):
    """attention+ffn at rank 64: two reviews of a batch come back as sequences; attention adapters
    alone refuse a batch of two with the reason."""
    _, _, train = reviews
    model = _trained_adapters(backbone, train, 64, targets="attention+ffn")
    rows = [k for k in range(900, 960) if int((train.x[k] != PAD).sum()) <= 12][:2]
    assert len(rows) == 2
    ids, labels = train.x[rows], train.y[rows]
    assert int((ids != PAD).sum()) < 64 - WIDTH_MARGIN  # b·n context states under the feed-forward bound
    result = lora_dager_attack(model, _gradient(model, ids, labels), 2)
    assert _rows(result.ids) == _rows(ids)
    narrow = _trained_adapters(backbone, train, 64)
    with pytest.raises(LeakshieldError, match="attention\\+ffn"):
        lora_dager_attack(narrow, _gradient(narrow, ids, labels), 2)


def test_gpt2_adapters_are_read_through_the_fused_attention(reviews):
    """GPT-2's query, key and value share one Conv1D (``c_attn``, peft's fan-in-fan-out): one A of r rows,
    so the bound is r. Random weights (general position), adapters with B ≠ 0: rank 32 reads reviews of
    fewer than 31 states exactly; rank 8 reads none of them and reports the cap."""
    tokenizer, _, train = reviews
    base = TextClassifier("gpt2", tokenizer.vocab_size, 32, 2, width=64, heads=2, seed=4).eval()
    rows = [k for k in range(900, 1000) if 12 <= _states(train.x[k : k + 1]) < 31][:4]
    assert len(rows) == 4
    for rank, readable in ((32, True), (8, False)):
        model = AdapterClassifier(base, rank=rank, seed=2)
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if ".lora_B" in name:
                    parameter.normal_(0, 0.05, generator=torch.Generator().manual_seed(rank))
        for k in rows:
            ids = train.x[k : k + 1]
            result = lora_dager_attack(model, _gradient(model, ids, train.y[k : k + 1]), 1)
            assert (_rows(result.ids) == _rows(ids)) is readable and result.capped is not readable


def test_fedrand_never_sends_a_withheld_half(backbone, reviews):
    """Every message of two rounds holds, per module, exactly one of A and B, the head always; the
    private halves differ from the server's after a round; plain LoRA sends both."""
    _, _, train = reviews
    clients = [train.subset(torch.arange(i * 40, i * 40 + 40)) for i in range(3)]
    model = AdapterClassifier(backbone, rank=4, seed=0)
    federation = AdapterFederation(model, clients, fedrand=True, seed=5, batch_size=20)
    seen_a = seen_b = 0
    for _ in range(2):
        for client, data in enumerate(clients):
            halves = federation.public_halves(client)
            message = federation.message(client, data)
            assert {"head.weight", "head.bias"} <= set(message)
            for module, half in halves.items():
                a_name, b_name = lora_names(module)
                assert (a_name in message) == (half == "A") and (b_name in message) == (half == "B")
                seen_a += half == "A"
                seen_b += half == "B"
            gradient = federation.victim_gradient(client, data.x[:1], data.y[:1])
            assert set(gradient) == set(message)
        federation.run(1)  # a round advances the coins
    assert seen_a and seen_b
    private = federation.private[0]
    server = dict(model.named_parameters())
    assert private and any(not torch.equal(v, server[k]) for k, v in private.items())
    view = dict(federation.view(0).named_parameters())  # the client trains on its own private halves
    sent = federation.sent_names(0)
    withheld = set(server) - sent
    assert withheld and all(torch.equal(view[n], private[n]) for n in withheld)
    assert all(torch.equal(view[n], server[n]) for n in sent)
    # the server moves each parameter by the mean over the clients that sent it, not over all clients
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    replay = copy.deepcopy(federation)
    messages = [replay.message(c, d) for c, d in enumerate(clients)]
    federation.run(1)
    for name, parameter in model.named_parameters():
        updates = [m[name] for m in messages if name in m]
        expected = before[name] + (torch.stack(updates).mean(0) if updates else 0)
        torch.testing.assert_close(parameter.detach(), expected)
    plain = AdapterFederation(AdapterClassifier(backbone, rank=4, seed=0), clients, fedrand=False)
    assert set(plain.message(0, clients[0])) == {n for n, _ in plain.model.named_parameters()}


def test_a_lora_model_in_a_text_grid_config():
    """The label names the rank; DAGER at batch 2 on attention-only adapters is refused up front, and so
    is an attack that plants a block (a LoRA update shares none of it); the shipped comparison is valid."""
    from pathlib import Path

    import yaml

    shipped = Path(__file__).parent.parent / "benchmarks" / "text_lora.yaml"
    models = parse_text_config(yaml.safe_load(shipped.read_text())).models
    assert [m.display for m in models] == [
        "full",
        "bert-lora-r4",
        "bert-lora-r8",
        "bert-lora-r16",
        "bert-lora-r64",
    ]
    base = {
        "track": "text",
        "models": [{"name": "bert", "pretrain": {"epochs": 1}, "lora": {"rank": 8}}],
        "attacks": ["dager"],
    }
    config = parse_text_config(base)
    assert config.models[0].display == "bert-lora-r8"
    with pytest.raises(ConfigError, match="attention\\+ffn"):
        parse_text_config({**base, "victims": {"batches": [1, 2]}})
    with pytest.raises(ConfigError, match="rank"):
        parse_text_config({**base, "models": [{"name": "bert", "lora": {"rank": 0}}]})
    with pytest.raises(ConfigError, match="plants a block"):
        parse_text_config({**base, "attacks": ["sequence-imprint"]})
    with pytest.raises(ConfigError, match="defenses\\[1\\]: row-guard"):
        parse_text_config({**base, "defenses": ["none", "row-guard"]})
    headless = [{"name": "bert", "lora": {"rank": 8, "train_head": False}}]
    with pytest.raises(ConfigError, match="train_head"):
        parse_text_config({**base, "models": headless, "attacks": ["tag"]})


@pytest.mark.parametrize("kind", ["bert", "gpt2"])
def test_language_model_pretraining_lowers_its_loss(reviews, kind):
    """The language-model objective (masked for BERT, next token for GPT-2) falls over two epochs on
    public reviews and leaves the head as drawn; the classifier objective trains the head."""
    from leakshield.text.backbone import language_model_loss, train_backbone

    tokenizer, public, _ = reviews
    model = TextClassifier(kind, tokenizer.vocab_size, 32, 2, width=32, heads=2, seed=0)
    head = model.head.weight.detach().clone()

    def loss() -> float:
        with torch.no_grad():
            return float(language_model_loss(model, public.x[:200], torch.Generator().manual_seed(9)))

    before = loss()
    train_backbone(model, public.x[:300], public.y[:300], objective="language-model", epochs=2, lr=3e-3)
    assert loss() < before - 0.5
    assert torch.equal(model.head.weight, head)
    train_backbone(model, public.x[:64], public.y[:64], objective="classifier", epochs=1)
    assert not torch.equal(model.head.weight, head)


def test_a_lora_grid_runs_end_to_end(tmp_path, rotten_tomatoes_csv):
    """``leakshield run`` on a tiny grid with a full and a LoRA model under no defense and DP-SGD (on the
    adapters): every cell stored; the frozen embedding gives the bag of words nothing under LoRA
    while the full model's gives it all."""
    import json
    import sqlite3

    import yaml

    from leakshield.cli import main

    config = {
        "track": "text",
        "name": "tiny-lora",
        "corpus": {"path": str(rotten_tomatoes_csv), "max_train": 300},
        "tokenizer": {"vocab_size": 300},
        "max_length": 24,
        "models": [
            {
                "name": "bert",
                "label": "full",
                "width": 16,
                "layers": 2,
                "heads": 2,
                "pretrain": {"epochs": 1},
            },
            {
                "name": "bert",
                "width": 16,
                "layers": 2,
                "heads": 2,
                "pretrain": {"epochs": 1},
                "lora": {"rank": 16},
            },
        ],
        "fl": {"clients": 3, "local": {"algorithm": "fedavg", "local_lr": 0.01, "batch_size": 32}},
        "states": ["untrained", "trained"],
        "training": {"rounds": 1},
        "victims": {"count": 2, "batches": [1]},
        "defenses": ["none", {"name": "dp-sgd", "clip": 1.0}],
        "attacks": ["bag-of-words", "dager"],
    }
    path = tmp_path / "lora.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--quiet", "--cache-dir", str(tmp_path / "cache")]) == 0
    with sqlite3.connect(out / "results.sqlite") as db:
        cells = {k: (s, json.loads(m)) for k, s, m in db.execute("SELECT key, status, metrics FROM cells")}
    assert len(cells) == 2 * 2 * 2 * 2 and all(s == "ok" for s, _ in cells.values())
    bags = {
        k: m["bag_recall"]
        for k, (_, m) in cells.items()
        if "attack=bag-of-words" in k and "defense=none" in k
    }
    assert all(v == (1.0 if "model=full|" in k else 0.0) for k, v in bags.items())
    # DP-SGD on the adapters trains and accounts as on a full model (ε recorded for both)
    spent = [m for k, (_, m) in cells.items() if "defense=dp-sgd" in k and "state=trained" in k]
    assert spent and all(m.get("epsilon", 0) > 0 for m in spent)
