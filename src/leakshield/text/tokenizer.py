"""The server's tokenizer: trained with ``tokenizers`` on the **public** split only (a tokenizer fitted on
clients' text would carry their words, and the server must hold it to read any update), deterministic,
and cached content-addressed like other artifacts.

Both kinds split text into words and punctuation (BERT's pre-tokenizer), lowercase and strip accents
when asked, and mark word-inner pieces with ``##``, so that :meth:`TextTokenizer.decode` restores word
boundaries for either. Both share one vocabulary, learned as byte-pair merges
(:mod:`leakshield.text.bpe`), and differ in how a word is cut into it:

- ``wordpiece``: WordPiece (BERT's), the longest known piece first;
- ``bpe``: the merges replayed in order (GPT-2's algorithm, on characters rather than bytes).

Ids 0–3 are ``[PAD]``, ``[UNK]``, ``[CLS]`` (a sequence's start) and ``[SEP]`` (its end) for both.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from leakshield.artifacts import Artifact, ArtifactCache, FitKey
from leakshield.errors import LeakshieldError
from leakshield.text.bpe import PREFIX, learn_bpe
from leakshield.text.extra import text_extra

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")
PAD, UNK, CLS, SEP = range(4)
TokenizerKind = Literal["wordpiece", "bpe"]


@dataclass(frozen=True)
class TextTokenizer:
    """A trained tokenizer (``tokenizers.Tokenizer``) and how it was made. :meth:`encode` gives padded id
    tensors, :meth:`decode` text."""

    backend: Any
    kind: TokenizerKind
    vocab_size: int

    def encode(self, texts: Sequence[str], max_length: int) -> torch.Tensor:
        """Ids (N × ``max_length``, int64): ``[CLS]`` text ``[SEP]``, the text cut to fit, ``[PAD]`` after."""
        if max_length < 3:
            raise LeakshieldError(f"max_length {max_length}: room for [CLS], one token and [SEP] needs 3")
        out = torch.full((len(texts), max_length), PAD, dtype=torch.long)
        for row, encoding in enumerate(self.backend.encode_batch(list(texts), add_special_tokens=False)):
            ids = [CLS, *encoding.ids[: max_length - 2], SEP]
            out[row, : len(ids)] = torch.tensor(ids)
        return out

    def decode(self, ids: torch.Tensor | Sequence[int]) -> str:
        """The text of one sequence of ids, special tokens dropped."""
        values = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return self.backend.decode([int(i) for i in values if int(i) >= len(SPECIALS)])

    def tokens(self, ids: torch.Tensor | Sequence[int]) -> list[str]:
        """The token strings of ``ids`` (special tokens included)."""
        values = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return [self.backend.id_to_token(int(i)) for i in values]

    def to_json(self) -> str:
        return self.backend.to_str()

    @classmethod
    def from_json(cls, text: str, kind: TokenizerKind) -> TextTokenizer:
        backend = text_extra("tokenizers").Tokenizer.from_str(text)
        return cls(backend, kind, backend.get_vocab_size())


def train_tokenizer(
    texts: Sequence[str], kind: TokenizerKind = "wordpiece", vocab_size: int = 2000, lowercase: bool = True
) -> TextTokenizer:
    """A ``kind`` tokenizer of at most ``vocab_size`` ids trained on ``texts``: the same for the same
    arguments (:mod:`leakshield.text.bpe` learns the merges; a merge needs a pair seen twice)."""
    tk = text_extra("tokenizers")
    if kind not in ("wordpiece", "bpe"):
        raise LeakshieldError(f"tokenizer kind {kind!r}: expected 'wordpiece' or 'bpe'")
    if vocab_size <= len(SPECIALS):
        raise LeakshieldError(f"vocab_size {vocab_size}: must exceed the {len(SPECIALS)} special tokens")
    steps = (
        [tk.normalizers.NFD(), tk.normalizers.Lowercase(), tk.normalizers.StripAccents()] if lowercase else []
    )
    normalizer = tk.normalizers.Sequence([*steps, tk.normalizers.Strip()])
    pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
    words = Counter(
        word for text in texts for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))
    )
    alphabet, merges = learn_bpe(words, vocab_size, min_frequency=2, reserved=len(SPECIALS))
    if len(SPECIALS) + len(alphabet) > vocab_size:
        raise LeakshieldError(
            f"vocab_size {vocab_size}: the texts hold {len(alphabet)} distinct characters (word-initial "
            f"and inner), which with the {len(SPECIALS)} special tokens need {len(SPECIALS) + len(alphabet)}"
        )
    vocab: dict[str, int] = {}
    for token in [*SPECIALS, *alphabet, *(a + b[len(PREFIX) :] for a, b in merges)]:
        vocab.setdefault(token, len(vocab))  # two merges can spell one token: it keeps its first id
    if kind == "wordpiece":
        model = tk.models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix=PREFIX)
    else:
        model = tk.models.BPE(vocab, merges, unk_token="[UNK]", continuing_subword_prefix=PREFIX)
    backend = tk.Tokenizer(model)
    backend.normalizer, backend.pre_tokenizer = normalizer, pre_tokenizer
    backend.decoder = tk.decoders.WordPiece(prefix=PREFIX)
    # the specials are vocabulary entries, not added tokens: a review that spells "[SEP]" is text
    return TextTokenizer(backend, kind, backend.get_vocab_size())


def text_fingerprint(texts: Sequence[str]) -> str:
    """SHA-256 (first 16 hex digits) of ``texts`` in order."""
    digest = hashlib.sha256()
    for text in texts:
        encoded = text.encode("utf-8")
        digest.update(len(encoded).to_bytes(8, "little") + encoded)
    return digest.hexdigest()[:16]


def public_tokenizer(
    public_texts: Sequence[str],
    kind: TokenizerKind = "wordpiece",
    vocab_size: int = 2000,
    lowercase: bool = True,
    cache: ArtifactCache | None = None,
) -> TextTokenizer:
    """:func:`train_tokenizer` on the public split's texts, stored in ``cache`` (default: the user's
    artifact cache) under the texts' fingerprint and the settings, and loaded from there next time."""
    store = cache or ArtifactCache()
    params = {"kind": kind, "vocab_size": vocab_size, "lowercase": lowercase}
    key = FitKey("tokenizer", params, "public", text_fingerprint(public_texts), seed=0)

    def fit() -> Artifact:
        trained = train_tokenizer(public_texts, kind, vocab_size, lowercase)
        return Artifact({}, {"tokenizer": trained.to_json()})

    artifact = store.get_or_fit(key, fit)
    return TextTokenizer.from_json(artifact.metadata["tokenizer"], kind)
