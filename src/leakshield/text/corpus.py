"""Labelled text corpora for federated language models: readers of the files users have, duplicates
dropped, and splits that keep a group (a movie) on one side.

Readers (all local files, nothing downloaded):

- :func:`read_rotten_tomatoes_csv`: the Rotten Tomatoes corpus (``category,text,movie_name,…``; critic
  snippets labelled ``fresh``/``rotten`` and plot summaries, grouped by movie), bzip2-compressed or not;
- :func:`read_rt_polarity`: Pang & Lee's sentence polarity files ``rt-polarity.pos`` / ``.neg`` (one
  snippet per line, Windows-1252);
- :func:`read_glue_tsv`: GLUE's SST-2 (``sentence<TAB>label`` with a header) and CoLA (no header:
  source, label, original label, sentence) TSVs.

Snippets of one movie are written about the same film, so a split that scatters them would put
near-copies of a client's text in the server's public split: :func:`split_by_group` keeps every group
on one side.
"""

from __future__ import annotations

import bz2
import csv
import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from leakshield.errors import DataFileMissingError, LeakshieldError
from leakshield.text.fetch import FETCH_HINT


@dataclass(frozen=True)
class TextCorpus:
    """Texts with integer labels and a group per text (the movie a review is about; a text's own index
    where a format has none). ``class_names[k]`` names label k."""

    name: str
    texts: tuple[str, ...]
    labels: tuple[int, ...]
    groups: tuple[str, ...]
    class_names: tuple[str, ...]

    def __post_init__(self) -> None:
        if not len(self.texts) == len(self.labels) == len(self.groups):
            raise ValueError(
                f"{self.name}: {len(self.texts)} texts, {len(self.labels)} labels, {len(self.groups)} groups"
            )
        bad = [y for y in self.labels if not 0 <= y < len(self.class_names)]
        if bad:
            raise ValueError(f"{self.name}: label {bad[0]} outside 0..{len(self.class_names) - 1}")

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, indices: Sequence[int]) -> TextCorpus:
        """The texts at ``indices``, in that order."""
        pick = list(indices)
        return TextCorpus(
            self.name,
            tuple(self.texts[i] for i in pick),
            tuple(self.labels[i] for i in pick),
            tuple(self.groups[i] for i in pick),
            self.class_names,
        )


def deduplicated(corpus: TextCorpus) -> tuple[TextCorpus, int]:
    """``corpus`` without repeated texts (the first occurrence kept, compared case-folded with runs of
    whitespace as one space, as the tokenizer sees them) and how many were dropped. Drop them before
    splitting: a repeated text could otherwise sit in a client's data and in the public split at once."""
    seen: set[str] = set()
    keep = []
    for i, text in enumerate(corpus.texts):
        key = " ".join(text.casefold().split())
        if key not in seen:
            seen.add(key)
            keep.append(i)
    return corpus.subset(keep), len(corpus) - len(keep)


@dataclass(frozen=True)
class TextSplits:
    """Disjoint train / test / public splits of one corpus; no group spans two of them."""

    train: TextCorpus
    test: TextCorpus
    public: TextCorpus


def split_by_group(
    corpus: TextCorpus, public_fraction: float = 0.2, test_fraction: float = 0.2, seed: int = 0
) -> TextSplits:
    """Shuffle the groups with ``seed`` and deal them to the test split, then the public split, then
    train, until each held-out split holds at least its fraction of the texts. Texts keep their order
    within a split."""
    if not 0 < test_fraction < 1 or not 0 <= public_fraction < 1 or public_fraction + test_fraction >= 1:
        raise LeakshieldError(
            f"split fractions: test_fraction {test_fraction} must be in (0, 1) and public_fraction "
            f"{public_fraction} in [0, 1), together below 1"
        )
    members: dict[str, list[int]] = {}
    for i, group in enumerate(corpus.groups):
        members.setdefault(group, []).append(i)
    order = sorted(members)
    random.Random(seed).shuffle(order)
    wanted = {"test": test_fraction * len(corpus), "public": public_fraction * len(corpus)}
    taken: dict[str, list[int]] = {"test": [], "public": [], "train": []}
    for group in order:
        side = next((s for s in ("test", "public") if len(taken[s]) < wanted[s]), "train")
        taken[side].extend(members[group])
    if not taken["train"]:
        raise LeakshieldError(f"{corpus.name}: {len(members)} group(s) left no text for the train split")
    return TextSplits(*(corpus.subset(sorted(taken[s])) for s in ("train", "test", "public")))


def read_rotten_tomatoes_csv(path: str | Path) -> TextCorpus:
    """Critic snippets of the Rotten Tomatoes corpus (``rotten`` = 0, ``fresh`` = 1), grouped by movie;
    the plot summaries (category ``plot``) carry no verdict and are left out. ``.bz2`` files are read
    compressed."""
    file = _existing(path, "the Rotten Tomatoes corpus CSV (rotten_tomatoes_corpus_full.csv.bz2)", FETCH_HINT)
    opener = bz2.open if file.suffix == ".bz2" else open
    what = "a UTF-8 CSV" + (", bzip2-compressed" if file.suffix == ".bz2" else "")
    with _readable(file, what), opener(file, "rt", encoding="utf-8", newline="") as handle:  # type: ignore[operator]
        reader = csv.DictReader(handle)
        missing = {"category", "text", "movie_name"} - set(reader.fieldnames or ())
        if missing:
            raise LeakshieldError(f"{file}: not the Rotten Tomatoes corpus: no column(s) {sorted(missing)}")
        rows = [r for r in reader if r["category"] in ("rotten", "fresh")]
    if any(r["text"] is None or r["movie_name"] is None for r in rows):
        raise LeakshieldError(f"{file}: a row has fewer fields than the header")
    return TextCorpus(
        "rotten-tomatoes",
        tuple(r["text"] for r in rows),
        tuple(int(r["category"] == "fresh") for r in rows),
        tuple(r["movie_name"] for r in rows),
        ("rotten", "fresh"),
    )


def read_rt_polarity(folder: str | Path) -> TextCorpus:
    """Pang & Lee's ``rt-polarity.neg`` (label 0) and ``rt-polarity.pos`` (label 1) in ``folder``; each
    line is one snippet, its own group."""
    texts: list[str] = []
    labels: list[int] = []
    for label, name in enumerate(("rt-polarity.neg", "rt-polarity.pos")):
        file = _existing(Path(folder) / name, f"Pang & Lee's sentence polarity file {name}")
        raw = file.read_bytes()
        try:
            decoded = raw.decode("cp1252")
        except UnicodeDecodeError:  # the 5 bytes cp1252 leaves undefined: Latin-1 reads every byte
            decoded = raw.decode("latin-1")
        lines = [line.strip() for line in decoded.split("\n")]
        texts += [line for line in lines if line]
        labels += [label] * sum(1 for line in lines if line)
    return TextCorpus(
        "rt-polarity", tuple(texts), tuple(labels), _own_groups(len(texts)), ("negative", "positive")
    )


def read_glue_tsv(path: str | Path, task: Literal["sst2", "cola"]) -> TextCorpus:
    """A GLUE TSV with labels: SST-2 (``sentence``, ``label`` columns under a header; 0 negative,
    1 positive) or CoLA (no header: source, label, original label, sentence; 0 unacceptable, 1
    acceptable). Each sentence is its own group."""
    file = _existing(path, f"a GLUE {task.upper()} TSV")
    with _readable(file, "a UTF-8 TSV"), file.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    if task == "sst2":
        if not rows or rows[0][:2] != ["sentence", "label"]:
            raise LeakshieldError(f"{file}: an SST-2 TSV starts with the header 'sentence<TAB>label'")
        if any(len(r) < 2 for r in rows[1:] if r):
            raise LeakshieldError(f"{file}: an SST-2 row needs a sentence and a label")
        pairs = [(r[0], r[1]) for r in rows[1:] if r]
        names = ("negative", "positive")
    else:
        if any(len(r) != 4 for r in rows if r):
            raise LeakshieldError(
                f"{file}: a CoLA TSV has 4 columns (source, label, original label, sentence)"
            )
        pairs = [(r[3], r[1]) for r in rows if r]
        names = ("unacceptable", "acceptable")
    try:
        labels = tuple(int(label) for _, label in pairs)
    except ValueError as exc:
        raise LeakshieldError(f"{file}: a label is not 0 or 1 ({exc})") from None
    if any(y not in (0, 1) for y in labels):
        raise LeakshieldError(f"{file}: a label is not 0 or 1")
    texts = tuple(text for text, _ in pairs)
    return TextCorpus(f"glue-{task}", texts, labels, _own_groups(len(texts)), names)


@contextmanager
def _readable(file: Path, what: str) -> Iterator[None]:
    """Decoding and format errors of ``file`` as one line saying what it should be."""
    try:
        yield
    except (UnicodeDecodeError, OSError, EOFError, csv.Error) as exc:
        raise LeakshieldError(f"{file}: not readable as {what} ({' '.join(str(exc).split())})") from None


def _own_groups(count: int) -> tuple[str, ...]:
    return tuple(str(i) for i in range(count))


def _existing(path: str | Path, what: str, hint: str = "") -> Path:
    file = Path(path).expanduser()
    if not file.is_file():
        raise DataFileMissingError(f"{what} not found at {file}" + (f": {hint}" if hint else ""))
    return file
