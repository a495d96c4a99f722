"""Corpora: every language loads, excerpts honour their token budget, paperwork is skipped."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from stress.core.errors import CorpusError
from stress.core.tokens import EstimateTokenizer, count_tokens
from stress.load.corpus import TOKEN_IDS, Corpus, check_corpus, corpus_files

CORPORA = Path(__file__).resolve().parents[2] / "corpora"


def test_shipped_corpora_are_large_and_multilingual() -> None:
    sizes = {
        d.name: sum(f.stat().st_size for f in corpus_files(d))
        for d in CORPORA.iterdir()
        if d.is_dir() and d.name != "LICENSES"
    }
    assert {"en", "es", "zh", "pl"} <= set(sizes)
    assert sum(sizes.values()) >= 1_000_000
    assert (CORPORA / "NOTICE").exists()


def test_root_folder_skips_readme_notice_and_licences() -> None:
    names = {p.name for p in corpus_files(CORPORA)}
    assert "README.md" not in names and not any("LICENSE" in n.upper() for n in names)


def test_the_corpus_encoded_on_several_threads_is_the_one_encoded_in_order() -> None:
    """The load encodes paragraphs in groups on threads; each keeps its own ids, in order."""
    import stress.load.corpus as corpus_mod

    threaded = Corpus(CORPORA)
    assert not threaded.ids_cached  # every language together: no ids file, encoded here
    assert corpus_mod._in_threads(len, ["a" * i for i in range(200)]) == list(range(200))
    tok = threaded.tok
    every = [
        (p, list(i or [])) for d in threaded.docs for p, i in zip(d.paragraphs, d.ids, strict=True)
    ]
    assert len(every) > 64  # enough for more than one thread where there are cores
    assert all(ids == tok.encode(p) for p, ids in every)
    assert [sum(d.counts) for d in threaded.docs] == [
        sum(len(tok.encode(p)) for p in d.paragraphs) for d in threaded.docs
    ]


@pytest.mark.parametrize("lang", ["en", "es", "zh", "pl"])
def test_a_bundled_corpus_ships_its_token_ids_and_they_are_current(
    lang: str, tmp_path: Path
) -> None:
    """Read, not encoded, on the way to the first request; the same ids as encoding the
    documents (a document changed without ``scripts/corpus_token_ids.py`` fails here)."""
    shipped = Corpus(CORPORA / lang)
    assert shipped.ids_cached, f"run scripts/corpus_token_ids.py: corpora/{lang}'s ids are stale"
    for f in corpus_files(CORPORA / lang):
        (tmp_path / f.name).write_bytes(f.read_bytes())
    encoded = Corpus(tmp_path)  # the same documents, no ids file
    assert not encoded.ids_cached
    assert [d.name for d in shipped.docs] == [d.name for d in encoded.docs]
    for a, b in zip(shipped.docs, encoded.docs, strict=True):
        assert a.paragraphs == b.paragraphs and a.counts == b.counts
        assert [list(i or []) for i in a.ids] == [list(i or []) for i in b.ids]
        # the joins come with the ids, measured: none is left for a request to measure
        assert len(a.joins) == len(a.paragraphs) and None not in a.joins
        assert a.joins == [encoded._join_tokens(b, i) for i in range(len(b.paragraphs))]


def test_an_ids_file_that_does_not_match_its_documents_is_not_used(tmp_path: Path) -> None:
    ids_file = TOKEN_IDS.format(name="tiktoken-cl100k_base")
    src = CORPORA / "en"
    for f in [*corpus_files(src), src / ids_file]:
        (tmp_path / f.name).write_bytes(f.read_bytes())
    assert Corpus(tmp_path).ids_cached
    doc = corpus_files(tmp_path)[0]
    doc.write_text(doc.read_text(encoding="utf-8").replace("the", "a", 1), encoding="utf-8")
    edited = Corpus(tmp_path)
    assert not edited.ids_cached  # encoded again: the file was made from other text
    tok = edited.tok
    assert all(
        list(i or []) == tok.encode(p)
        for d in edited.docs
        for p, i in zip(d.paragraphs, d.ids, strict=True)
    )
    data = (tmp_path / ids_file).read_bytes()
    for damaged in (data[:100], data[:-2], b"not an ids file"):
        (tmp_path / ids_file).write_bytes(damaged)
        assert not Corpus(tmp_path).ids_cached


@pytest.mark.parametrize("lang", ["en", "es", "zh", "pl"])
def test_excerpts_stay_within_budget(lang: str) -> None:
    corpus = Corpus(CORPORA / lang)
    rng = random.Random(7)
    for lo, hi in [(50, 80), (1000, 1500), (4000, 8000)]:
        for _ in range(5):
            ex = corpus.excerpt(rng, lo, hi)
            assert lo * 0.95 <= ex.tokens <= hi, (lang, lo, hi, ex.tokens)
            assert ex.tokens == count_tokens(ex.text)
            assert "\ufffd" not in ex.text


@pytest.mark.parametrize("lang", ["en", "es", "zh", "pl"])
def test_excerpt_counts_are_exact_without_encoding_the_excerpt(lang: str) -> None:
    # the count is built from paragraph counts, join tokens and word-boundary cuts; it
    # must equal the tokenizer's count of the text, every time
    corpus = Corpus(CORPORA / lang)
    rng = random.Random(11)
    for lo, hi in [(150, 250), (20, 40), (600, 900)]:
        for _ in range(200):
            ex = corpus.excerpt(rng, lo, hi)
            assert ex.tokens == count_tokens(ex.text), (lang, lo, hi)
            assert lo * 0.95 <= ex.tokens <= hi


def test_a_document_is_drawn_in_proportion_to_its_tokens() -> None:
    # the cumulative weights are summed once; the draw is the one the weights give
    corpus = Corpus(CORPORA / "en")
    weights = [sum(d.counts) for d in corpus.docs]
    a, b = random.Random(5), random.Random(5)
    for _ in range(500):
        assert corpus.draw_doc(a) == b.choices(range(len(weights)), weights=weights)[0]


def test_excerpts_with_the_estimate_tokenizer() -> None:
    corpus = Corpus(CORPORA / "en", EstimateTokenizer())
    rng = random.Random(2)
    for _ in range(50):
        ex = corpus.excerpt(rng, 150, 250)
        assert ex.tokens == corpus.tok.count(ex.text) and 140 <= ex.tokens <= 250


def test_excerpt_longer_than_a_document_runs_on(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha beta gamma.\n\n" * 20)
    (tmp_path / "b.md").write_text("delta epsilon zeta.\n\n" * 20)
    ex = Corpus(tmp_path).excerpt(random.Random(1), 150, 200)
    assert 140 <= ex.tokens <= 200 and "+" in ex.source


def test_empty_or_missing_corpus(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match=r"holds no \.txt or \.md document with text"):
        Corpus(tmp_path)
    with pytest.raises(CorpusError, match="does not exist"):
        corpus_files(tmp_path / "missing")
    (tmp_path / "blank.txt").write_text(" \n\n\t\n")
    with pytest.raises(CorpusError, match="has only empty documents"):
        check_corpus(tmp_path)


def test_only_regular_text_files_inside_the_corpus_are_documents(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Inside.\n")
    (tmp_path / "env.txt").symlink_to("/proc/self/environ")
    outside = tmp_path.parent / f"{tmp_path.name}-secret.txt"
    outside.write_text("outside the corpus\n")
    (tmp_path / "link.md").symlink_to(outside)
    (tmp_path / "data.bin").write_bytes(b"\0\1")
    assert [p.name for p in corpus_files(tmp_path)] == ["a.txt"]
    for bad in [Path("/proc/self/environ"), Path("/dev/zero"), tmp_path / "data.bin"]:
        with pytest.raises(CorpusError):
            corpus_files(bad)
