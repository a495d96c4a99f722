"""Documents that simulated users paste, cut to a token budget.

A corpus is any folder of ``.txt`` / ``.md`` files (searched recursively) or a single file.
Documents are split into paragraphs and each paragraph is tokenized once at load, so an
excerpt of N tokens costs a few list operations, not a re-tokenization of the document.
Excerpts start at a paragraph boundary and run on into the next document when one is too
short, so a "paste" reads like a real chunk of a real document.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

from stress.tokens import Tokenizer, get_tokenizer

SUFFIXES = {".txt", ".md"}
_SKIP = re.compile(r"^(README|NOTICE|LICEN[CS]E|COPYING)", re.IGNORECASE)
"""A corpus folder's own paperwork is not pasted."""


def corpus_files(root: Path) -> list[Path]:
    """The documents under ``root``; raises ``OSError`` if it cannot be read."""
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise FileNotFoundError(2, "no such file or folder", str(root))
    return sorted(
        p
        for p in root.rglob("*")
        if p.suffix.lower() in SUFFIXES
        and p.is_file()
        and not _SKIP.match(p.name)
        and "LICENSES" not in p.relative_to(root).parts
    )


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


class Corpus:
    def __init__(self, root: Path, tokenizer: Tokenizer | None = None) -> None:
        self.root = root
        self.tok = tokenizer or get_tokenizer()
        self.docs: list[_Doc] = []
        for path in corpus_files(root):
            text = path.read_text(encoding="utf-8", errors="replace")
            paras = [p.strip() for p in text.replace("\r\n", "\n").split("\n\n")]
            paras = [p for p in paras if p]
            if paras:
                counts = [self.tok.count(p) for p in paras]
                self.docs.append(_Doc(path.name, paras, counts))
        if not self.docs:
            raise FileNotFoundError(2, "no readable .txt/.md documents", str(root))
        self._weights = [sum(d.counts) for d in self.docs]
        self.total_tokens = sum(self._weights)

    def excerpt(self, rng: random.Random, lo: int, hi: int) -> Excerpt:
        """An excerpt of between ``lo`` and ``hi`` tokens (as counted by the tokenizer).

        Paragraph counts are summed to get close, then the joined text is measured and
        topped up or trimmed: tokens merge across paragraph joins, so sums are estimates.
        """
        target = rng.randint(lo, hi)
        d = rng.choices(range(len(self.docs)), weights=self._weights)[0]
        i = rng.randrange(len(self.docs[d].paragraphs))
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

    def _cut(self, text: str, n_tokens: int) -> str:
        try:
            ids = self.tok.encode(text)[:n_tokens]
            return self.tok.decode(ids).rstrip("\ufffd")
        except NotImplementedError:  # estimate tokenizer: ~4 characters a token
            return text[: n_tokens * 4]
