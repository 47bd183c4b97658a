"""Federated language models: text corpora read from users' files, the server's tokenizer trained on the
public split, small transformers built from configs, what their updates leak (the bag of words, the
length, a single label; TAG's, LAMP's and DAGER's reconstructions; a malicious server's sequence
imprint) and ROUGE scores against the truth
(``pip install 'leakshield[text]'`` for the tokenizer, the models and ROUGE)."""

from leakshield.text.bag_of_words import bag_of_words, embedding_parameter
from leakshield.text.corpus import (
    TextCorpus,
    TextSplits,
    deduplicated,
    read_glue_tsv,
    read_rotten_tomatoes_csv,
    read_rt_polarity,
    split_by_group,
)
from leakshield.text.dager import DagerResult, dager_attack
from leakshield.text.fetch import default_corpus_path, fetch_rotten_tomatoes
from leakshield.text.imprint import ImprintResult, imprint_model, sequence_imprint
from leakshield.text.lamp import lamp_attack
from leakshield.text.models import TextClassifier
from leakshield.text.prior import LanguagePrior, public_prior, train_prior
from leakshield.text.scores import matched, no_information_text, text_scores, token_accuracy
from leakshield.text.tag import TagResult, leaked_label, leaked_length, tag_attack
from leakshield.text.tokenizer import TextTokenizer, public_tokenizer, text_fingerprint, train_tokenizer

__all__ = [
    "DagerResult",
    "ImprintResult",
    "LanguagePrior",
    "TagResult",
    "TextClassifier",
    "TextCorpus",
    "TextSplits",
    "TextTokenizer",
    "bag_of_words",
    "dager_attack",
    "deduplicated",
    "default_corpus_path",
    "embedding_parameter",
    "fetch_rotten_tomatoes",
    "imprint_model",
    "lamp_attack",
    "leaked_label",
    "leaked_length",
    "matched",
    "no_information_text",
    "public_prior",
    "public_tokenizer",
    "read_glue_tsv",
    "read_rotten_tomatoes_csv",
    "read_rt_polarity",
    "sequence_imprint",
    "split_by_group",
    "tag_attack",
    "text_fingerprint",
    "text_scores",
    "token_accuracy",
    "train_prior",
    "train_tokenizer",
]
