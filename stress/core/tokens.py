"""Token counting that works offline.

Stock tiktoken downloads its encoding files on first use, which fails on air-gapped GPU
boxes and in CI. We ship ``cl100k_base`` inside the package (``stress/data``, MIT licence
notice in ``stress/data/NOTICE``) and check its SHA-256 before use. If the file is missing
or damaged we fall back to a clearly labelled estimate (``~4 characters per token``,
CJK characters one each), and ``tokenizer_name()`` says which one is in use so the run
manifest records it.
"""

from __future__ import annotations

import functools
import hashlib
from array import array
from collections.abc import Sequence
from importlib import resources
from typing import Protocol

CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
# Copied from tiktoken_ext.openai_public.cl100k_base (MIT licence, see stress/data/NOTICE).
_CL100K_PAT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_CL100K_SPECIAL = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}


class Tokenizer(Protocol):
    name: str

    def encode(self, text: str) -> list[int]: ...

    def decode(self, tokens: list[int]) -> str: ...

    def token_bytes(self, token: int) -> bytes: ...

    def byte_lengths(self) -> Sequence[int] | None:
        """Each ordinary token's length in UTF-8 bytes, by id (None: no token ids)."""
        ...

    def count(self, text: str) -> int: ...


class TiktokenTokenizer:
    """cl100k_base from the shipped file."""

    name = "tiktoken:cl100k_base"

    def __init__(self) -> None:
        import binascii

        import tiktoken

        data = resources.files("stress").joinpath("data/cl100k_base.tiktoken").read_bytes()
        if hashlib.sha256(data).hexdigest() != CL100K_SHA256:
            raise ValueError("stress/data/cl100k_base.tiktoken does not match its SHA-256")
        # Lines of "base64-token rank". The file is the one the hash names, whose ranks are
        # its line numbers (a test holds that), so they need no parsing: half the time of
        # a per-line parse, on the way to the first request (issue 15).
        tokens = data.split()[0::2]
        ranks = dict(zip(map(binascii.a2b_base64, tokens), range(len(tokens)), strict=True))
        self._enc = tiktoken.Encoding(
            "cl100k_base",
            pat_str=_CL100K_PAT,
            mergeable_ranks=ranks,
            special_tokens=_CL100K_SPECIAL,
        )
        # tiktoken's Rust CoreBPE copies the ranks into its own tables when it is built
        # (PyO3 extracts an owned HashMap), and the Python Encoding keeps the dict only to
        # pickle itself, which stress never does: dropping it gives back ~13 MiB per process.
        vars(self._enc).pop("_mergeable_ranks", None)
        # where each token ends in a text's bytes is a running sum of these: a corpus cut
        # measured that per token with a call into tiktoken (~4 ms here, 200 KB)
        self._lengths = array("H", map(len, ranks))
        del ranks, data, tokens

    def encode(self, text: str) -> list[int]:
        return self._enc.encode_ordinary(text)

    def decode(self, tokens: list[int]) -> str:
        return self._enc.decode(tokens)

    def token_bytes(self, token: int) -> bytes:
        return self._enc.decode_single_token_bytes(token)

    def byte_lengths(self) -> Sequence[int]:
        return self._lengths

    def count(self, text: str) -> int:
        return len(self._enc.encode_ordinary(text))


class EstimateTokenizer:
    """Fallback when the encoding cannot be loaded: a labelled estimate, not a count."""

    name = "estimate:chars/4"

    def encode(self, text: str) -> list[int]:
        # One pseudo-token per ~4 characters (per CJK character); ids are code points.
        out: list[int] = []
        run = 0
        for ch in text:
            if ord(ch) >= 0x2E80:
                out.append(ord(ch))
                run = 0
            else:
                run += 1
                if run == 4:
                    out.append(ord(ch))
                    run = 0
        return out

    def decode(self, tokens: list[int]) -> str:
        raise NotImplementedError("the estimate tokenizer cannot decode")

    def token_bytes(self, token: int) -> bytes:
        raise NotImplementedError("the estimate tokenizer has no tokens")

    def byte_lengths(self) -> None:
        return None

    def count(self, text: str) -> int:
        return max(1, len(self.encode(text))) if text else 0


@functools.cache
def get_tokenizer() -> Tokenizer:
    """The best tokenizer available offline (cached for the process)."""
    try:
        return TiktokenTokenizer()
    except Exception:  # missing file, bad hash, tiktoken import error: fall back, labelled
        return EstimateTokenizer()


EXACT_COUNT_CHARS = 1 << 16
"""Texts up to this many characters (~16k tokens) are counted exactly."""
_SAMPLES = 8


def count_tokens(text: str) -> int:
    """Tokens in ``text``: exact up to ``EXACT_COUNT_CHARS``, estimated past it.

    This runs on the event loop for conversation bookkeeping (ceilings, estimates), where
    the server's own count replaces it once known. Tokenizing costs about a second per MB,
    so a 10 MB reply counted exactly froze every other user for 20 s (issue 12): a long
    text is counted from evenly spaced samples and scaled, which bounds the cost at
    ``EXACT_COUNT_CHARS`` characters per call and errs by about 1 % on prose.
    """
    tok = get_tokenizer()
    n = len(text)
    if n <= EXACT_COUNT_CHARS:
        return tok.count(text)
    width = EXACT_COUNT_CHARS // _SAMPLES
    step = n // _SAMPLES
    sampled = sum(tok.count(text[i * step : i * step + width]) for i in range(_SAMPLES))
    return max(1, round(sampled * n / (width * _SAMPLES)))


def tokenizer_name() -> str:
    return get_tokenizer().name
