"""Federated language models: text corpora read from users' files, the server's tokenizer trained on the
public split (``pip install 'leakshield[text]'`` for the tokenizer and models)."""

from leakshield.text.corpus import (
    TextCorpus,
    TextSplits,
    deduplicated,
    read_glue_tsv,
    read_rotten_tomatoes_csv,
    read_rt_polarity,
    split_by_group,
)
from leakshield.text.fetch import default_corpus_path, fetch_rotten_tomatoes
from leakshield.text.tokenizer import TextTokenizer, public_tokenizer, text_fingerprint, train_tokenizer

__all__ = [
    "TextCorpus",
    "TextSplits",
    "TextTokenizer",
    "deduplicated",
    "default_corpus_path",
    "fetch_rotten_tomatoes",
    "public_tokenizer",
    "read_glue_tsv",
    "read_rotten_tomatoes_csv",
    "read_rt_polarity",
    "split_by_group",
    "text_fingerprint",
    "train_tokenizer",
]
