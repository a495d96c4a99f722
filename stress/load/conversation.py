"""One simulated user's growing conversation and how it isolates the prefix cache.

Cache modes (field note 1: measure the cache on purpose, never by accident):

- ``per_user``: every conversation starts with a marker unique to this run, user and
  conversation, so users never share cache, while a user's own history can hit.
- ``cold``: a marker unique to each *request* at the very start of the prompt: nothing
  can hit, every request pays full prefill.
- ``shared``: one system prompt common to all users of the run (it can be cached once for
  everybody), then per-user content.

The run nonce in every marker keeps a re-run against a warm server from hitting the
previous run's cache.

A conversation can open with pre-built history (``conversation.start_tokens``): earlier
turns cut from the corpus, drawn per user, placed after the same markers, so a long
conversation is unique to its user exactly as a grown one is.
"""

from __future__ import annotations

import functools
import hashlib
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from stress.core.tokens import count_tokens

if TYPE_CHECKING:
    from stress.load.corpus import Corpus

CacheMode = Literal["per_user", "cold", "shared"]
MESSAGE_OVERHEAD = 4
"""Tokens a chat template adds around each message (role markers), for estimates."""
MAX_CHARS_PER_TOKEN = 32
"""More characters a token than any tokenizer's average over a reply (cl100k: ~4 for prose,
its longest tokens ~30); a usage count that implies more is not the history's size."""
MIN_PREBUILT_PASTE = 16
"""A last pre-built turn with less room than this asks without pasting."""


@functools.lru_cache(maxsize=64)
def _prompt_tokens(prompt: str) -> int:
    return count_tokens(prompt)


_DIGITS_AS_ZERO = str.maketrans("123456789", "000000000")


@functools.lru_cache(maxsize=256)
def _shape_tokens(shape: str) -> int:
    return count_tokens(shape)


def _marker_tokens(marker: str) -> int:
    """Tokens of a marker line, counted once per shape: with every digit read as 0. Exact,
    because the pre-tokenizer cuts a run of digits into groups of at most three whatever
    the digits are, and every group of one to three digits is one token
    (``tests/load/test_conversation.py`` holds both); a marker's numbers are all digits, so a
    run counts a few shapes, not a marker per conversation."""
    return _shape_tokens(marker.translate(_DIGITS_AS_ZERO))


def _system_tokens(system: str, prompt: str) -> int:
    """Tokens of a conversation's system message: its marker line plus the scenario's
    system prompt, counted once per run (the marker ends with a newline, after which the
    tokenizer starts a new piece, so the two counts add up exactly when the prompt opens
    with no space)."""
    marker = system[: len(system) - len(prompt)]
    if not prompt or not marker.endswith("\n") or prompt[0].isspace():
        return count_tokens(system)
    return _marker_tokens(marker) + _prompt_tokens(prompt)


@dataclass(frozen=True, slots=True)
class History:
    """Earlier turns a conversation opens with, counted once when built."""

    turns: tuple[tuple[str, str, str], ...]
    """(paste, question, reply) per turn; an empty paste means the turn only asks."""
    tokens: int
    """Local-tokenizer tokens of these messages, role overhead included."""


def build_history(
    corpus: Corpus,
    rng: random.Random,
    tokens: int,
    paste: tuple[int, int],
    asks: Sequence[str],
    reply_max: int,
) -> History:
    """About ``tokens`` of turns (within 1 %, at most 32 short): each a corpus paste of
    ``paste`` tokens and an ask, answered by a corpus excerpt of up to ``reply_max`` tokens
    (a quarter of the paste). Budgets are local-tokenizer tokens. Every excerpt is counted
    once, by the corpus; nothing is counted again when the history is sent."""
    ask_tokens = {q: count_tokens(q) for q in set(asks)}
    turns: list[tuple[str, str, str]] = []
    total = 0
    while total < tokens - min(32, tokens // 100):
        left = tokens - total
        question = rng.choice(asks)
        fixed = ask_tokens[question] + 2 * MESSAGE_OVERHEAD
        want = rng.randint(*paste)
        reply_n = max(1, min(reply_max, want // 4, (left - fixed) // 5))
        paste_n = min(want, left - fixed - reply_n - 1)
        if paste_n < MIN_PREBUILT_PASTE:  # the last few tokens: ask, and a reply to fill
            paste_n, reply_n = 0, max(1, min(reply_max, left - fixed))
        text = corpus.excerpt(rng, paste_n, paste_n) if paste_n else None
        reply = corpus.excerpt(rng, reply_n, reply_n)
        turns.append((text.text if text else "", question, reply.text))
        total += fixed + reply.tokens + (text.tokens + 1 if text else 0)
    return History(tuple(turns), total)


@dataclass(slots=True)
class Conversation:
    user: int
    index: int
    cache: CacheMode
    run_nonce: str
    system_prompt: str
    keep_reasoning: bool = False
    messages: list[dict[str, str]] = field(default_factory=list)
    turns: int = 0
    tokens_est: int = 0
    """Estimated prompt tokens of the history so far (local tokenizer)."""
    last_prompt_tokens: int | None = None
    """Server-reported prompt tokens of the last request, when known."""
    last_reply_tokens: int = 0
    prefilled_tokens: int = 0
    """Local-tokenizer tokens of the pre-built history this conversation opened with."""

    def __post_init__(self) -> None:
        if self.cache == "shared":
            system = f"[run {self.run_nonce}]\n{self.system_prompt}"
        else:  # per_user and cold: the user/conversation marker opens the prompt
            # The unique part comes first, so two users differ from the first token on
            # (servers that cache at token rather than block granularity share nothing).
            # 12 digits (40 bits) of a hash: digits, so its token count is known by shape
            h = hashlib.sha1(f"{self.run_nonce}:{self.user}:{self.index}".encode()).digest()
            uid = int.from_bytes(h[:5], "big") % 10**12
            system = f"[{uid:012d} user {self.user} conversation {self.index}]\n"
            system += self.system_prompt
        self.messages = [{"role": "system", "content": system}]
        self.tokens_est = _system_tokens(system, self.system_prompt) + MESSAGE_OVERHEAD

    def known_tokens(self) -> int:
        """Best estimate of the history length: server numbers where we have them."""
        if self.last_prompt_tokens is not None:
            return self.last_prompt_tokens + self.last_reply_tokens + MESSAGE_OVERHEAD
        return self.tokens_est

    def reusable_tokens(self) -> int:
        """Tokens of the next prompt that this user already sent (0 on a first turn)."""
        if self.turns == 0:
            return 0
        return self.known_tokens()

    def prefill(self, history: History) -> None:
        """Open the conversation with pre-built turns, before its first request. They are
        history, not turns: the first request sent is still turn 1, with nothing the server
        has seen before (``reusable_tokens`` 0)."""
        for paste, question, reply in history.turns:
            self.messages.append({"role": "user", "content": self.user_message(paste, question)})
            self.messages.append({"role": "assistant", "content": reply})
        self.tokens_est += history.tokens
        self.prefilled_tokens = history.tokens

    def user_message(self, paste: str | None, question: str) -> str:
        text = f"{paste}\n\n{question}" if paste else question
        if self.cache == "shared" and len(self.messages) == 1:  # the first user message
            text = f"[user u{self.user:03d}-c{self.index:03d}]\n{text}"
        return text

    def request_messages(self, user_text: str) -> list[dict[str, str]]:
        """Messages to send for the next turn (history is not modified until the reply)."""
        msgs = [*self.messages, {"role": "user", "content": user_text}]
        if self.cache == "cold":
            first = msgs[0]
            marker = f"[request {uuid.uuid4().hex}]\n"
            msgs[0] = {"role": first["role"], "content": marker + first["content"]}
        return msgs

    def commit_turn(
        self,
        user_text: str,
        reply_content: str,
        reply_reasoning: str,
        prompt_tokens: int | None,
        user_tokens: int | None = None,
        reply_tokens: int | None = None,
    ) -> None:
        """Append a finished exchange to the history. ``user_tokens`` and ``reply_tokens``
        are counts the caller already has (the parts it built the message from; the
        server's completion tokens), so the hot path does not tokenize the text again."""
        reply = reply_content
        if self.keep_reasoning and reply_reasoning:
            reply = f"<think>{reply_reasoning}</think>\n{reply_content}"
        self.messages.append({"role": "user", "content": user_text})
        self.messages.append({"role": "assistant", "content": reply})
        if reply_tokens is not None and len(reply) > MAX_CHARS_PER_TOKEN * max(reply_tokens, 1):
            # more text than that many tokens can carry (a server that miscounts, a
            # proxy that pads): count what the history really holds, or it outgrows its
            # ceiling unseen and every later prompt carries the excess
            reply_tokens = None
        if reply_tokens is None:
            reply_tokens = count_tokens(reply) if reply else 0
        if user_tokens is None:
            user_tokens = count_tokens(user_text)
        self.tokens_est += user_tokens + reply_tokens + 2 * MESSAGE_OVERHEAD
        self.last_prompt_tokens = prompt_tokens
        self.last_reply_tokens = reply_tokens
        self.turns += 1
