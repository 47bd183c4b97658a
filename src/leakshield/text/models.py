"""Small transformers for federated text classification, built from ``transformers`` configs with random
weights (no hub download: ``HF_HUB_OFFLINE`` is set before ``transformers`` is imported).

- ``bert``: a BERT encoder (Devlin et al., NAACL 2019): the pooled ``[CLS]`` state (a tanh layer on
  it) feeds a linear head; ``[PAD]`` positions are masked out of the attention and the word embedding
  keeps ``[PAD]``'s row at zero gradient (``padding_idx``).
- ``gpt2``: a GPT-2 decoder (Radford et al., 2019): causal attention, so a token sees the ones before
  it, and the last real token's state feeds the linear head. Its word embedding is tied to no output
  layer here (a classifier has none); a language-model head would tie them (see
  :mod:`leakshield.text.bag_of_words`).

Both run eager attention (second derivatives, which gradient matching needs, through every kernel) and
no dropout (a client's update is then a function of its batch alone). :meth:`TextClassifier.forward`
takes token ids; :meth:`TextClassifier.forward_embeddings` takes the word embeddings directly, with the
mask, which is how an attack optimizes continuous inputs (TAG).
"""

from __future__ import annotations

import os
from typing import Any, Literal

import torch
from torch import nn

from leakshield.errors import LeakshieldError
from leakshield.text.extra import text_extra
from leakshield.text.tokenizer import CLS, PAD, SEP

TextModelKind = Literal["bert", "gpt2"]


def _transformers() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return text_extra("transformers")


class TextClassifier(nn.Module):
    """A ``kind`` transformer of ``layers`` blocks, ``width`` features and ``heads`` attention heads over
    ``vocab_size`` token ids and up to ``max_length`` positions, classifying into ``num_classes``;
    weights drawn from ``seed`` (the global RNG is left as it was)."""

    #: ``transformers``' attention-mask code branches on the data, which ``vmap`` cannot batch: per-sample
    #: gradients (DP-SGD) go one sample after another
    per_sample_by_loop = True

    def __init__(
        self,
        kind: TextModelKind,
        vocab_size: int,
        max_length: int,
        num_classes: int,
        *,
        width: int = 64,
        layers: int = 2,
        heads: int = 2,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if width % heads:
            raise LeakshieldError(f"width {width} must be a multiple of heads {heads}")
        tf = _transformers()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            if kind == "bert":
                config = tf.BertConfig(vocab_size=vocab_size, hidden_size=width, num_hidden_layers=layers,
                                       num_attention_heads=heads, intermediate_size=4 * width,
                                       max_position_embeddings=max_length, type_vocab_size=1,
                                       pad_token_id=PAD, hidden_dropout_prob=0.0,
                                       attention_probs_dropout_prob=0.0)  # fmt: skip
                config._attn_implementation = "eager"
                self.backbone = tf.BertModel(config, add_pooling_layer=True)
            elif kind == "gpt2":
                config = tf.GPT2Config(vocab_size=vocab_size, n_positions=max_length, n_embd=width,
                                       n_layer=layers, n_head=heads, resid_pdrop=0.0, embd_pdrop=0.0,
                                       attn_pdrop=0.0, pad_token_id=PAD, bos_token_id=CLS,
                                       eos_token_id=SEP)  # fmt: skip
                config._attn_implementation = "eager"
                self.backbone = tf.GPT2Model(config)
            else:
                raise LeakshieldError(f"text model kind {kind!r}: expected 'bert' or 'gpt2'")
            self.head = nn.Linear(width, num_classes)
        self.kind, self.max_length = kind, max_length

    @property
    def word_embeddings(self) -> nn.Embedding:
        """The input embedding: one row per token id."""
        return self.backbone.get_input_embeddings()

    @property
    def position_embeddings(self) -> nn.Embedding:
        """The position embedding: one row per position."""
        return self.backbone.wpe if self.kind == "gpt2" else self.backbone.embeddings.position_embeddings

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits (N × classes) of token ids (N × L, ``[PAD]`` after each sequence)."""
        return self.forward_embeddings(self.word_embeddings(ids), ids != PAD)

    def forward_embeddings(self, embeddings: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Logits of word embeddings (N × L × width) with ``mask`` (N × L, true at real tokens)."""
        if embeddings.shape[1] > self.max_length:
            raise LeakshieldError(
                f"sequences of {embeddings.shape[1]} tokens: the model holds {self.max_length}"
            )
        out = self.backbone(inputs_embeds=embeddings, attention_mask=mask.long())
        if self.kind == "bert":
            return self.head(out.pooler_output)
        last = mask.long().sum(1).clamp_min(1) - 1  # the last real token (sequences are right-padded)
        return self.head(out.last_hidden_state[torch.arange(len(last)), last])
