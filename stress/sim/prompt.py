"""Lay a chat out as token ids, the way a chat template would.

The prefix cache only works if the same conversation prefix always gives the same token
prefix. A real template concatenates role markers and contents; tokenizing that whole
string with BPE can merge tokens across a message boundary, so we tokenize each piece on
its own and concatenate the ids (what servers effectively see with special-token
markers). Contents repeat every turn of a conversation, so tokenized contents are kept in
a bounded cache: a 50k-token history is not re-tokenized on every turn.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from stress.core.tokens import get_tokenizer

IM_START = 100264
IM_END = 100265
_CACHE_MAX = 4096  # entries
_CACHE_MAX_TOKENS = 1_000_000  # ~36 MB of ids at most


class PromptTokenizer:
    """Chat messages -> prompt token ids (ChatML-like layout)."""

    def __init__(self) -> None:
        self._tok = get_tokenizer()
        self._cache: OrderedDict[str, list[int]] = OrderedDict()
        self._cached_tokens = 0
        self._nl = self._tok.encode("\n")

    def encode(self, text: str) -> list[int]:
        ids = self._cache.get(text)
        if ids is not None:
            self._cache.move_to_end(text)
            return ids
        ids = self._tok.encode(text)
        self._cache[text] = ids
        self._cached_tokens += len(ids)
        while len(self._cache) > _CACHE_MAX or self._cached_tokens > _CACHE_MAX_TOKENS:
            _old, old_ids = self._cache.popitem(last=False)
            self._cached_tokens -= len(old_ids)
        return ids

    def render(self, messages: list[dict[str, Any]]) -> list[int]:
        """Token ids of the prompt: every message, then the assistant generation prompt."""
        out: list[int] = []
        for msg in messages:
            out.append(IM_START)
            out.extend(self.encode(str(msg.get("role", "user")) + "\n"))
            out.extend(self.encode(message_text(msg.get("content"))))
            out.append(IM_END)
            out.extend(self._nl)
        out.append(IM_START)
        out.extend(self.encode("assistant\n"))
        return out


def message_text(content: Any) -> str:
    """A message's text: a plain string, or the text parts of a content list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    return str(content)
