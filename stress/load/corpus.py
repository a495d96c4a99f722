"""Documents that simulated users paste, cut to a token budget.

A corpus is any folder of ``.txt`` / ``.md`` files (searched recursively) or a single file.
Documents are split into paragraphs and each paragraph is tokenized once at load (or its
ids read from the corpus's ``TOKEN_IDS`` file, which the bundled corpora ship), so an
excerpt of N tokens costs a few list operations, not a re-tokenization of the document.
Excerpts start at a paragraph boundary and run on into the next document when one is too
short, so a "paste" reads like a real chunk of a real document.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import stat
import struct
import sys
from array import array
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import NamedTuple, TypeVar

from stress.config.bundled import CORPORA
from stress.core.errors import CorpusError, Interrupted
from stress.core.tokens import Tokenizer, get_tokenizer

SUFFIXES = {".txt", ".md"}
_SKIP = re.compile(r"^(README|NOTICE|LICEN[CS]E|COPYING)", re.IGNORECASE)
"""A corpus folder's own paperwork is not pasted."""


BUNDLED = CORPORA
"""The documents shipped with stress, inside the package (``stress/data/corpora``; the
repository's ``corpora/`` links there); a scenario names them ``bundled:NAME``."""
ROOTS_ENV = "STRESS_CORPUS_ROOTS"
"""Extra folders a corpus may live in, separated by ``os.pathsep`` (``:`` on Linux)."""
_FORBIDDEN = tuple(Path(p) for p in ("/proc", "/dev", "/sys"))
MAX_DOCUMENT_BYTES = 64 << 20
"""A single document above this is refused: a paste never needs more, and reading a
huge file into memory per run is how a typo (a disk image, a log) freezes the machine."""

_T = TypeVar("_T")
_FIX_FOLDER = "point it at a folder of .txt/.md files (relative to the scenario file)"


def allowed_roots(scenario_dir: Path, extra: Iterable[str | Path] = ()) -> list[Path]:
    """Where a corpus may live: the scenario's folder, the bundled ``corpora/``, the
    folders in ``$STRESS_CORPUS_ROOTS`` and any given with ``--corpus-root``."""
    env = [r for r in os.environ.get(ROOTS_ENV, "").split(os.pathsep) if r.strip()]
    roots = [scenario_dir, BUNDLED, *map(Path, env), *map(Path, extra)]
    out: list[Path] = []
    for r in roots:
        resolved = Path(os.path.expanduser(r)).resolve()
        if resolved not in out:
            out.append(resolved)
    return out


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def confine(corpus: Path, roots: list[Path]) -> Path:
    """The corpus path with symlinks resolved, if it lies under one of ``roots``;
    raises ``CorpusError`` otherwise (a corpus is pasted into every chat body, so a path
    like ``/proc/self/environ`` would send the environment, keys included, to the server)."""
    real = corpus.resolve()
    if any(_under(real, bad) for bad in _FORBIDDEN) or not any(_under(real, r) for r in roots):
        where = ", ".join(str(r) for r in roots)
        raise CorpusError(
            str(corpus),
            f"corpus {str(real)!r} is outside the folders a corpus may come from ({where})",
            f"move the documents under the scenario's folder, or allow their folder with "
            f"--corpus-root DIR or {ROOTS_ENV}=DIR",
        )
    return real


def _document(path: Path, root: Path) -> bool:
    """Whether ``path`` is a document of the corpus at ``root``: a regular ``.txt`` /
    ``.md`` file whose real location (symlinks resolved) is inside the corpus."""
    real = path.resolve()
    if not _under(real, root) or any(_under(real, bad) for bad in _FORBIDDEN):
        return False
    if real.suffix.lower() not in SUFFIXES or path.suffix.lower() not in SUFFIXES:
        return False
    try:
        return stat.S_ISREG(real.stat().st_mode)
    except OSError:
        return False


def corpus_files(root: Path) -> list[Path]:
    """The documents under ``root``: regular ``.txt`` / ``.md`` files, symlinks resolved
    and kept only when they stay inside ``root``, never anything under /proc, /dev or /sys.

    Raises ``CorpusError`` (one line, path and fix) when ``root`` is missing, a special
    file, or cannot be listed.
    """
    real = root.resolve()
    if any(_under(real, bad) for bad in _FORBIDDEN):
        raise CorpusError(
            str(root), f"corpus {str(root)!r} is a system path, not documents", _FIX_FOLDER
        )
    if real.is_file():
        if real.suffix.lower() not in SUFFIXES or not _document(root, real.parent):
            raise CorpusError(
                str(root),
                f"corpus file {str(root)!r} is not a regular .txt or .md file",
                "give a .txt/.md file or a folder of them",
            )
        return [real]
    if not real.exists():
        raise CorpusError(str(root), f"corpus {str(root)!r} does not exist", _FIX_FOLDER)
    if not real.is_dir():
        raise CorpusError(
            str(root), f"corpus {str(root)!r} is not a regular file or folder", _FIX_FOLDER
        )
    try:
        found = sorted(
            p
            for p in real.rglob("*")
            if p.suffix.lower() in SUFFIXES
            and not _SKIP.match(p.name)
            and "LICENSES" not in p.relative_to(real).parts
            and _document(p, real)
        )
    except OSError as e:
        raise CorpusError(
            str(root),
            f"cannot list corpus {str(root)!r} ({e.strerror or e})",
            "make the folder readable (chmod) or point at another one",
        ) from None
    return found


def has_text(path: Path) -> bool:
    """Whether the document holds anything but whitespace; raises ``CorpusError`` when it
    cannot be read or is too large."""
    try:
        size = path.stat().st_size
        if size > MAX_DOCUMENT_BYTES:
            raise CorpusError(
                str(path),
                f"document {str(path)!r} is {size / (1 << 20):.0f} MiB; the limit is "
                f"{MAX_DOCUMENT_BYTES >> 20} MiB per document",
                "split it into smaller files or remove it from the corpus",
            )
        with path.open("rb") as f:
            while block := f.read(1 << 16):
                if block.strip():
                    return True
    except OSError as e:
        raise CorpusError(
            str(path),
            f"cannot read document {str(path)!r} ({e.strerror or e})",
            "make it readable (chmod) or remove it from the corpus",
        ) from None
    return False


def check_corpus(root: Path) -> list[Path]:
    """The corpus's documents, after checking that at least one of them holds text."""
    files = corpus_files(root)
    if not files:
        raise CorpusError(
            str(root),
            f"corpus {str(root)!r} holds no .txt or .md files",
            "add documents or point at another folder",
        )
    if not any(has_text(f) for f in files):
        raise CorpusError(
            str(root),
            f"corpus {str(root)!r} has only empty documents",
            "add text to them or point at another folder",
        )
    return files


WORD_LOOKBACK = 16
"""Tokens a cut may step back to end before a word (``Corpus._cut_paragraph``)."""


_LOAD_THREADS = 8
"""Threads that encode a corpus at load (tiktoken scales to about this many)."""


def _in_threads(
    fn: Callable[[str], _T], items: list[str], stop: Callable[[], bool] | None = None
) -> list[_T]:
    """``[fn(x) for x in items]``, in groups on up to ``_LOAD_THREADS`` threads; raises
    ``Interrupted`` once ``stop()`` is true (looked at before each item)."""

    def group(part: list[str]) -> list[_T]:
        out = []
        for x in part:
            if stop is not None and stop():
                raise Interrupted("stopped encoding the corpus")
            out.append(fn(x))
        return out

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    threads = min(_LOAD_THREADS, cores, len(items) // 32)
    if threads <= 1:
        return group(items)
    step = -(-len(items) // (threads * 4))
    groups = [items[i : i + step] for i in range(0, len(items), step)]
    with ThreadPoolExecutor(threads, thread_name_prefix="stress-corpus") as pool:
        return [r for done in pool.map(group, groups) for r in done]


def _decodes(tok: Tokenizer) -> bool:
    """Whether the tokenizer has real token ids (encode, decode, per-token bytes)."""
    try:
        ids = tok.encode("a")
        tok.token_bytes(ids[0])
        return tok.decode(ids) == "a"
    except (NotImplementedError, IndexError):
        return False


TOKEN_IDS = "token-ids.{name}.bin"
"""A corpus folder's token ids for one tokenizer (``write_token_ids``): the bundled corpora
ship theirs, so the quick start's first request does not wait for its corpus to be
encoded (~37 ms on 2 cores, twice that on a slow host), nor a request for the tokens a
paragraph's join adds (``Corpus._join_tokens``: ~20 us a request in a short run, where
each paragraph is met for the first time)."""
_IDS_MAGIC = b"stress-token-ids-2\n"
"""Then the SHA-256 of the tokenizer's name and the paragraphs, the paragraph count ``n``
(u32), each paragraph's token count (``n`` u32), the tokens its join adds (``n`` i32), and
the ids (u32), all little-endian."""


class TokenIds(NamedTuple):
    ids: list[array[int]]
    joins: list[int]


def _token_ids_file(root: Path, tok: Tokenizer) -> Path:
    return root / TOKEN_IDS.format(name=re.sub(r"[^A-Za-z0-9_.-]+", "-", tok.name))


def _paragraphs_digest(tok: Tokenizer, paragraphs: list[str]) -> bytes:
    """What the ids were made from: the tokenizer and every paragraph, in order."""
    h = hashlib.sha256(tok.name.encode())
    for p in paragraphs:
        h.update(b"\0")
        h.update(p.encode("utf-8", "surrogatepass"))
    return h.digest()


def read_token_ids(root: Path, tok: Tokenizer, paragraphs: list[str]) -> TokenIds | None:
    """The paragraphs' token ids and joins from ``root``'s ids file, or None where there is
    none or it was made from other text or another tokenizer (then the corpus is encoded)."""
    path = _token_ids_file(root, tok)
    try:
        data = path.read_bytes() if root.is_dir() else b""
    except OSError:
        return None
    head = len(_IDS_MAGIC) + 32 + 4
    if len(data) < head or not data.startswith(_IDS_MAGIC):
        return None
    if data[len(_IDS_MAGIC) : head - 4] != _paragraphs_digest(tok, paragraphs):
        return None
    (n,) = struct.unpack_from("<I", data, head - 4)
    if n != len(paragraphs) or (len(data) - head) % 4 or len(data) - head < 8 * n:
        return None
    counts, joins, ids = array("I"), array("i"), array("I")
    counts.frombytes(data[head : head + 4 * n])
    joins.frombytes(data[head + 4 * n : head + 8 * n])
    ids.frombytes(data[head + 8 * n :])
    if sys.byteorder != "little":
        for a in (counts, joins, ids):
            a.byteswap()
    if sum(counts) != len(ids):
        return None
    out, at = [], 0
    for c in counts:
        out.append(ids[at : at + c])
        at += c
    return TokenIds(out, joins.tolist())


def write_token_ids(root: Path, tokenizer: Tokenizer | None = None) -> Path:
    """Write ``root``'s token ids file (for the bundled corpora, before a release:
    ``scripts/corpus_token_ids.py``); a test holds the shipped ones current."""
    corpus = Corpus(root, tokenizer)
    every = [p for d in corpus.docs for p in d.paragraphs]
    ids = [i for d in corpus.docs for i in d.ids]
    if any(i is None for i in ids):
        raise ValueError(f"tokenizer {corpus.tok.name} has no token ids")
    counts = array("I", (len(i) for i in ids if i is not None))
    joins = array(
        "i", (corpus._join_tokens(d, i) for d in corpus.docs for i in range(len(d.paragraphs)))
    )
    words = array("I")
    for i in ids:
        assert i is not None
        words.extend(i)
    if sys.byteorder != "little":
        for a in (counts, joins, words):
            a.byteswap()
    path = _token_ids_file(root, corpus.tok)
    path.write_bytes(
        _IDS_MAGIC
        + _paragraphs_digest(corpus.tok, every)
        + struct.pack("<I", len(counts))
        + counts.tobytes()
        + joins.tobytes()
        + words.tobytes()
    )
    return path


@dataclass(frozen=True, slots=True)
class Excerpt:
    text: str
    tokens: int
    source: str


@dataclass(slots=True)
class _Doc:
    name: str
    paragraphs: list[str]
    counts: list[int]
    ids: list[array[int] | None] = field(default_factory=list)
    """Each paragraph's token ids (None with the estimate tokenizer)."""
    joins: list[int | None] = field(default_factory=list)
    """Tokens the join after each paragraph adds (None: not measured yet; ``_join_tokens``)."""
    ends: list[array[int] | None] = field(default_factory=list)
    """Per paragraph, the UTF-8 byte offset where each of its tokens ends (None: not
    needed yet; ``_cut_paragraph``)."""


class Corpus:
    def __init__(
        self,
        root: Path,
        tokenizer: Tokenizer | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> None:
        """``stop``: polled while the paragraphs are encoded; true ends the load
        (``Interrupted``), so a Ctrl-C does not wait for a large corpus."""
        self.root = root
        self.tok = tokenizer or get_tokenizer()
        self._has_ids = _decodes(self.tok)
        self.docs: list[_Doc] = []
        for path in corpus_files(root):
            if not has_text(path):
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            paras = [p.strip() for p in text.replace("\r\n", "\n").split("\n\n")]
            paras = [p for p in paras if p]
            if paras:
                self.docs.append(_Doc(path.name, paras, []))
        # the token ids of a bundled corpus come with it (``write_token_ids``); else
        # tiktoken lets go of the GIL while it encodes: the paragraphs of all documents
        # are encoded on several cores, as the load is on the way to the first request
        every = [p for d in self.docs for p in d.paragraphs]
        cached = read_token_ids(root, self.tok, every) if self._has_ids else None
        self.ids_cached = cached is not None
        """The ids were read from the corpus's ``TOKEN_IDS`` file, not encoded."""
        ids = iter(cached.ids if cached is not None else _in_threads(self._ids, every, stop))
        joins = iter(cached.joins) if cached is not None else None
        for d in self.docs:
            d.ids = [next(ids) for _ in d.paragraphs]
            if joins is not None:
                d.joins = [next(joins) for _ in d.paragraphs]
            d.counts = [
                self.tok.count(p) if i is None else len(i)
                for p, i in zip(d.paragraphs, d.ids, strict=True)
            ]
        if not self.docs:
            raise CorpusError(
                str(root),
                f"corpus {str(root)!r} holds no .txt or .md document with text",
                "add documents or point at another folder",
            )
        weights = [sum(d.counts) for d in self.docs]
        self._doc_range = range(len(self.docs))
        self._cum_weights = list(accumulate(weights))
        self.total_tokens = sum(weights)
        self._word_starts: dict[int, bool] = {}
        """Whether each token seen at a cut opens a word (``_cut_paragraph``)."""

    def draw_doc(self, rng: random.Random) -> int:
        """A document's index, drawn in proportion to its tokens (the same draw as
        ``rng.choices(range(n), weights=tokens)``, without summing the weights each time)."""
        return rng.choices(self._doc_range, cum_weights=self._cum_weights)[0]

    def excerpt(self, rng: random.Random, lo: int, hi: int) -> Excerpt:
        """An excerpt of between ``lo`` and ``hi`` tokens (as counted by the tokenizer).

        With token ids (tiktoken) the count is kept exact as the excerpt grows, with no
        encoding of the joined text (it was most of the CPU a request cost stress): each
        whole paragraph adds its own count, each join the tokens that ``"\n\n"`` adds
        after the paragraph before it (``_join_tokens``: cl100k's pre-tokenizer starts a
        new piece after the newlines, so the next paragraph's tokens are its own), and a
        paragraph cut short ends before a token that starts a word (``_cut_paragraph``).
        Without ids (the estimate tokenizer) the joined text is measured and topped up.
        """
        target = rng.randint(lo, hi)
        d = self.draw_doc(rng)
        docs = self.docs
        doc = docs[d]
        i = rng.randrange(len(doc.paragraphs))
        if not self._has_ids:
            return self._excerpt_measured(target, d, i, lo, hi)
        sources = [doc.name]
        parts: list[str] = []
        n = 0
        prev: tuple[_Doc, int] | None = None  # the last whole paragraph taken
        while n < target:
            join = self._join_tokens(*prev) if prev is not None else 0
            room = target - n - join
            count = doc.counts[i]
            if count > room:
                if room >= 4 or not parts or (room >= 1 and n + join < lo):
                    slack = min(WORD_LOOKBACK, target - lo)  # a cut short of lo: no
                    text, m = self._cut_paragraph(doc, i, max(room, 1), slack)
                    parts.append(text)
                    n += join + m
                break
            parts.append(doc.paragraphs[i])
            n += join + count
            prev = (doc, i)
            i += 1
            if i >= len(doc.paragraphs):
                d, i = (d + 1) % len(docs), 0
                doc = docs[d]
                sources.append(doc.name)
        text = "\n\n".join(parts)
        if n > hi:  # a cut that re-encodes one token longer, at the very top of the range
            text = self._cut(text, hi)
            n = self.tok.count(text)
        return Excerpt(text=text, tokens=n, source="+".join(dict.fromkeys(sources)))

    def _excerpt_measured(self, target: int, d: int, i: int, lo: int, hi: int) -> Excerpt:
        """``excerpt`` for a tokenizer without ids: paragraph counts are summed to get
        close, then the joined text is measured and topped up or trimmed."""
        sources = [self.docs[d].name]
        parts: list[str] = []
        n = 0
        for _ in range(64):  # each pass adds text; it converges in a few
            need = target - n
            while need > 0:
                doc = self.docs[d]
                para, count = doc.paragraphs[i], doc.counts[i]
                if count > need:
                    if need >= 4 or not parts:
                        parts.append(self._cut(para, need))
                    need = 0
                else:
                    parts.append(para)
                    need -= count + 1
                i += 1
                if i >= len(doc.paragraphs):
                    d, i = (d + 1) % len(self.docs), 0
                    sources.append(self.docs[d].name)
            n = self.tok.count("\n\n".join(parts))
            if n >= lo or n >= target - 2:
                break
        text = "\n\n".join(parts)
        if n > hi:  # joins can add a few tokens: trim back into range
            text = self._cut(text, hi)
            n = self.tok.count(text)
        return Excerpt(text=text, tokens=n, source="+".join(dict.fromkeys(sources)))

    def _join_tokens(self, doc: _Doc, i: int) -> int:
        """Tokens that ``"\n\n"`` adds after paragraph ``i`` (1; 0 where it merges with
        the paragraph's closing punctuation; -1 where the merged piece encodes shorter),
        measured once per paragraph (a bundled corpus ships them)."""
        if not doc.joins:
            doc.joins = [None] * len(doc.paragraphs)
        n = doc.joins[i]
        if n is None:
            n = doc.joins[i] = self.tok.count(doc.paragraphs[i] + "\n\n") - doc.counts[i]
        return n

    def _ids(self, text: str) -> array[int] | None:
        """A paragraph's token ids, kept so a cut needs no second encoding (~4 bytes a
        token); None for the estimate tokenizer, which has no ids."""
        return array("I", self.tok.encode(text)) if self._has_ids else None

    def _cut_paragraph(self, doc: _Doc, i: int, n_tokens: int, slack: int) -> tuple[str, int]:
        """Paragraph ``i`` cut to at most ``n_tokens`` tokens, and its exact count. The
        cut falls before a token that opens a word (a space and then no space: the start
        of a pre-tokenizer piece), at most ``slack`` tokens short, so the text encodes to
        exactly the tokens kept; where none is that near (Chinese has few spaces), the
        cut text is measured."""
        ids = doc.ids[i]
        assert ids is not None
        word = self._word_starts
        for j in range(n_tokens, max(n_tokens - slack - 1, 0), -1):
            opens = word.get(ids[j])
            if opens is None:
                piece = self.tok.token_bytes(ids[j])
                opens = word[ids[j]] = len(piece) > 1 and piece[0] == 32 and piece[1] > 32
            if opens:  # the j tokens before a word end on a character: their bytes
                para, end = doc.paragraphs[i], self._ends(doc, i)[j - 1]
                if para.isascii():  # a character a byte: no round trip through UTF-8
                    return para[:end], j
                return para.encode()[:end].decode(), j
        text = self.tok.decode(ids[:n_tokens].tolist()).rstrip("\ufffd")
        return text, self.tok.count(text)

    def _ends(self, doc: _Doc, i: int) -> array[int]:
        """Where each token of paragraph ``i`` ends in its UTF-8 bytes, measured once."""
        if not doc.ends:
            doc.ends = [None] * len(doc.paragraphs)
        ends = doc.ends[i]
        if ends is None:
            ids = doc.ids[i]
            assert ids is not None
            lengths = self.tok.byte_lengths()
            assert lengths is not None  # ids come only from a tokenizer that has them
            ends = doc.ends[i] = array("I", accumulate(map(lengths.__getitem__, ids)))
        return ends

    def _cut(self, text: str, n_tokens: int) -> str:
        try:
            ids = self.tok.encode(text)[:n_tokens]
            return self.tok.decode(ids).rstrip("\ufffd")
        except NotImplementedError:  # estimate tokenizer: ~4 characters a token
            return text[: n_tokens * 4]
