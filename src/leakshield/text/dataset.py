"""Tokenized text as a federated dataset: :class:`TokenSet` (token ids and labels, the interface of an
image set, so that the FL simulation, the clients and the defense pipeline take it unchanged),
:class:`TextInfo` (the public facts the server holds: tokenizer, vocabulary, length, classes) and
:func:`load_text_data`, which reads a corpus, drops duplicates, splits it by group (a movie never spans
two splits), fits the tokenizer on the public split alone and encodes every split; and
:func:`partition_text`, the clients' shares (IID, or whole groups per client: non-IID by movie)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from leakshield.artifacts import ArtifactCache
from leakshield.data.registry import refuse_one_class
from leakshield.errors import ConfigError, DataFileMissingError
from leakshield.text.corpus import (
    TextCorpus,
    deduplicated,
    read_glue_tsv,
    read_rotten_tomatoes_csv,
    read_rt_polarity,
    split_by_group,
)
from leakshield.text.fetch import FETCH_HINT, default_corpus_path
from leakshield.text.tokenizer import PAD, TextTokenizer, TokenizerKind, public_tokenizer

CorpusFormat = Literal["rotten-tomatoes", "rt-polarity", "sst2", "cola"]
TextPartitionKind = Literal["iid", "by-group"]


@dataclass(frozen=True)
class TokenSet:
    """Token ids ``x`` (long, N × L, ``[CLS]`` … ``[SEP]`` then ``[PAD]``) with integer labels ``y`` (N,)
    and optional per-sample ``sensitive`` flags: the text counterpart of an image set, with the same
    ``subset`` / ``to`` / ``len`` the FL clients use."""

    x: torch.Tensor
    y: torch.Tensor
    sensitive: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.x.ndim != 2 or self.y.ndim != 1 or len(self.x) != len(self.y):
            raise ValueError(f"bad TokenSet shapes: x {tuple(self.x.shape)}, y {tuple(self.y.shape)}")
        if self.x.dtype.is_floating_point:
            raise ValueError(f"token ids must be integers, got {self.x.dtype}")

    def __len__(self) -> int:
        return len(self.y)

    def to(self, device: torch.device | str) -> TokenSet:
        flags = self.sensitive.to(device) if self.sensitive is not None else None
        return TokenSet(self.x.to(device), self.y.to(device), flags)

    def subset(self, indices: torch.Tensor | list[int]) -> TokenSet:
        idx = torch.as_tensor(indices, dtype=torch.long)
        flags = self.sensitive[idx.to(self.sensitive.device)] if self.sensitive is not None else None
        return TokenSet(self.x[idx.to(self.x.device)], self.y[idx.to(self.y.device)], flags)

    @property
    def lengths(self) -> torch.Tensor:
        """Each sequence's length in tokens, ``[CLS]`` and ``[SEP]`` included."""
        return (self.x != PAD).sum(1)


@dataclass(frozen=True)
class TextInfo:
    """Public facts about a tokenized corpus (the server holds all of them): its ``name``, the
    ``tokenizer`` fitted on the public split, the longest sequence ``max_length`` and the classes.
    ``normalize`` is the identity: token ids are the model's input as they are."""

    name: str
    tokenizer: TextTokenizer
    max_length: int
    num_classes: int
    class_names: tuple[str, ...] = ()

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def normalize(self, ids: torch.Tensor) -> torch.Tensor:
        return ids

    def denormalize(self, ids: torch.Tensor) -> torch.Tensor:
        return ids


@dataclass(frozen=True)
class TextData:
    """Disjoint train / test / public splits, tokenized; ``groups[i]``: the group (movie) of train
    sequence i; ``texts``: the train split's texts as read; ``dropped``: duplicates removed."""

    train: TokenSet
    test: TokenSet
    public: TokenSet
    info: TextInfo
    groups: tuple[str, ...]
    texts: tuple[str, ...]
    dropped: int


def read_corpus(path: str | Path | None, kind: CorpusFormat) -> TextCorpus:
    """The corpus at ``path`` in format ``kind`` (default path: the Rotten Tomatoes CSV that
    ``leakshield fetch-corpus`` puts in the data cache)."""
    if path is None:
        if kind != "rotten-tomatoes":
            raise ConfigError(f"corpus.path: a {kind} corpus needs the path of its files")
        found = default_corpus_path()
        if not found.is_file():
            raise DataFileMissingError(f"corpus.path: no corpus given and none at {found}; {FETCH_HINT}")
        path = found
    if kind == "rotten-tomatoes":
        return read_rotten_tomatoes_csv(path)
    if kind == "rt-polarity":
        return read_rt_polarity(path)
    return read_glue_tsv(path, kind)


def load_text_data(
    corpus: TextCorpus,
    *,
    tokenizer_kind: TokenizerKind = "wordpiece",
    vocab_size: int = 2000,
    lowercase: bool = True,
    max_length: int = 32,
    public_fraction: float = 0.2,
    test_fraction: float = 0.2,
    split_seed: int = 0,
    max_train: int | None = None,
    cache: ArtifactCache | None = None,
) -> TextData:
    """``corpus`` without duplicates, split by group, tokenized with a tokenizer fitted on the public
    split alone (cached under the public texts' fingerprint) and cut to ``max_length`` tokens.
    ``max_train``: keep the first that many training texts (quick runs)."""
    unique, dropped = deduplicated(corpus)
    splits = split_by_group(unique, public_fraction, test_fraction, split_seed)
    if not len(splits.public):
        raise ConfigError(
            "corpus.public_fraction: 0 leaves the server no public text to fit the tokenizer on; "
            "use a fraction above 0"
        )
    refuse_one_class(f"corpus {corpus.name}", "test", torch.tensor(splits.test.labels), corpus.class_names)
    tokenizer = public_tokenizer(splits.public.texts, tokenizer_kind, vocab_size, lowercase, cache)
    train = splits.train
    if max_train is not None and len(train) > max_train:
        train = train.subset(range(max_train))

    def tokens(part: TextCorpus) -> TokenSet:
        return TokenSet(tokenizer.encode(part.texts, max_length), torch.tensor(part.labels, dtype=torch.long))

    info = TextInfo(corpus.name, tokenizer, max_length, len(corpus.class_names), corpus.class_names)
    return TextData(tokens(train), tokens(splits.test), tokens(splits.public), info, train.groups,
                    train.texts, dropped)  # fmt: skip


def partition_text(
    groups: tuple[str, ...], clients: int, kind: TextPartitionKind, seed: int
) -> list[torch.Tensor]:
    """Each client's rows of the train split: ``iid`` deals the texts at random (sizes differ by at most
    one); ``by-group`` deals whole groups (movies) at random, each to the client holding the fewest texts
    so far, so a client's texts are about its own movies (non-IID). A pure function of its arguments."""
    if clients < 1:
        raise ConfigError(f"fl.clients: must be at least 1, got {clients}")
    rng = random.Random(seed)
    if kind == "iid":
        order = list(range(len(groups)))
        rng.shuffle(order)
        parts = [sorted(order[i::clients]) for i in range(clients)]
    else:
        members: dict[str, list[int]] = {}
        for i, group in enumerate(groups):
            members.setdefault(group, []).append(i)
        if len(members) < clients:
            raise ConfigError(
                f"partition by-group: {len(members)} groups for {clients} clients; every client needs a group"
            )
        names = sorted(members)
        rng.shuffle(names)
        parts = [[] for _ in range(clients)]
        for name in names:
            smallest = min(range(clients), key=lambda c: (len(parts[c]), c))
            parts[smallest].extend(members[name])
        parts = [sorted(p) for p in parts]
    return [torch.tensor(p, dtype=torch.long) for p in parts]
