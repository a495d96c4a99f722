"""Plausible reply text that costs nothing to generate.

Replies are drawn from a small vocabulary of words that are each exactly one token (with
and without a leading space), so a reply of N pieces is N tokens, its token ids are known
without calling the tokenizer per output token, and the same text sent back by the client
in the next turn tokenizes to the very same ids (which is what makes the prefix cache hit).
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

from stress.core.tokens import get_tokenizer

_WORDS = [
    "the",
    "model",
    "server",
    "cache",
    "block",
    "token",
    "request",
    "user",
    "answer",
    "document",
    "section",
    "point",
    "result",
    "value",
    "data",
    "time",
    "system",
    "memory",
    "context",
    "batch",
    "prompt",
    "reply",
    "report",
    "change",
    "first",
    "second",
    "third",
    "main",
    "key",
    "short",
    "long",
    "new",
    "old",
    "good",
    "clear",
    "simple",
    "useful",
    "large",
    "small",
    "is",
    "are",
    "was",
    "has",
    "have",
    "can",
    "will",
    "may",
    "should",
    "would",
    "could",
    "must",
    "also",
    "then",
    "thus",
    "still",
    "often",
    "and",
    "or",
    "but",
    "so",
    "because",
    "when",
    "while",
    "after",
    "before",
    "since",
    "where",
    "which",
    "that",
    "this",
    "these",
    "it",
    "they",
    "we",
    "you",
    "he",
    "she",
    "one",
    "two",
    "three",
    "many",
    "more",
    "most",
    "some",
    "each",
    "every",
    "other",
    "such",
    "only",
    "shows",
    "gives",
    "makes",
    "takes",
    "uses",
    "runs",
    "keeps",
    "finds",
    "reads",
    "writes",
    "needs",
    "seems",
    "helps",
    "means",
    "part",
    "case",
    "fact",
    "way",
    "form",
    "idea",
    "plan",
    "rule",
    "step",
    "test",
    "work",
    "view",
    "line",
    "list",
    "note",
    "text",
    "word",
    "in",
    "on",
    "at",
    "by",
    "for",
    "with",
    "from",
    "into",
    "over",
    "under",
    "about",
    "between",
    "through",
    "during",
    "without",
    "summary",
    "detail",
    "example",
    "reason",
    "question",
    "problem",
    "method",
    "number",
    "level",
    "state",
    "order",
    "group",
]
_THINK = [
    "let",
    "me",
    "think",
    "about",
    "this",
    "first",
    "the",
    "user",
    "wants",
    "a",
    "short",
    "answer",
    "so",
    "I",
    "should",
    "check",
    "the",
    "main",
    "points",
    "then",
    "write",
    "them",
    "out",
    "clearly",
    "okay",
    "that",
    "seems",
    "right",
    "now",
    "I",
    "will",
    "answer",
]


@dataclass(frozen=True, slots=True)
class Vocab:
    """Pieces (text) and their token ids: ``spaced`` has a leading space, ``bare`` not."""

    spaced: tuple[str, ...]
    spaced_ids: tuple[int, ...]
    bare: tuple[str, ...]
    bare_ids: tuple[int, ...]
    cap: tuple[str, ...]
    cap_ids: tuple[int, ...]
    period: str
    period_id: int


def _single(words: list[str]) -> list[str]:
    tok = get_tokenizer()
    keep = []
    for w in words:
        forms = (" " + w, w.capitalize(), " " + w.capitalize())
        if all(len(tok.encode(f)) == 1 for f in forms):
            keep.append(w)
    return keep or ["a"]


@functools.cache
def vocab(thinking: bool = False) -> Vocab:
    tok = get_tokenizer()
    words = _single(list(_THINK if thinking else _WORDS))
    spaced = tuple(" " + w for w in words)
    bare = tuple(w.capitalize() for w in words)
    cap = tuple(" " + b for b in bare)

    def one(text: str) -> int:
        ids = tok.encode(text)
        return ids[0] if ids else 0

    return Vocab(
        spaced=spaced,
        spaced_ids=tuple(one(s) for s in spaced),
        bare=bare,
        bare_ids=tuple(one(b) for b in bare),
        cap=cap,
        cap_ids=tuple(one(c) for c in cap),
        period=".",
        period_id=one("."),
    )


def make_reply(rng: random.Random, n: int, thinking: bool = False) -> tuple[list[str], list[int]]:
    """``n`` pieces of filler text and their ids: sentences of 6-16 words."""
    v = vocab(thinking)
    pieces: list[str] = []
    ids: list[int] = []
    nwords = len(v.spaced)
    picks = rng.choices(range(nwords), k=n)
    until_stop = rng.randint(6, 16)
    start = True
    for i in range(n):
        if not start and until_stop <= 0 and i < n - 1:
            pieces.append(v.period)
            ids.append(v.period_id)
            until_stop = rng.randint(6, 16)
            start = True
            continue
        k = picks[i]
        if start and not pieces:
            pieces.append(v.bare[k])
            ids.append(v.bare_ids[k])
        elif start:
            pieces.append(v.cap[k])
            ids.append(v.cap_ids[k])
        else:
            pieces.append(v.spaced[k])
            ids.append(v.spaced_ids[k])
        start = False
        until_stop -= 1
    return pieces, ids
