"""The shipped tokenizer works offline and matches tiktoken's cl100k_base."""

from __future__ import annotations

import subprocess
import sys

from stress.core.tokens import EstimateTokenizer, TiktokenTokenizer, get_tokenizer


def test_shipped_cl100k_works_offline_with_known_counts() -> None:
    tok = get_tokenizer()
    assert tok.name == "tiktoken:cl100k_base"
    assert tok.encode("hello world") == [15339, 1917]  # cl100k_base ids
    assert tok.decode(tok.encode("zażółć gęślą jaźń 你好")) == "zażółć gęślą jaźń 你好"


def test_the_shipped_file_ranks_its_tokens_by_line() -> None:
    """The loader takes each token's rank from its line number, not its rank column."""
    import base64
    import hashlib
    from importlib import resources

    from stress.core.tokens import CL100K_SHA256

    data = resources.files("stress").joinpath("data/cl100k_base.tiktoken").read_bytes()
    assert hashlib.sha256(data).hexdigest() == CL100K_SHA256
    lines = [line.split() for line in data.splitlines() if line]
    assert [int(rank) for _, rank in lines] == list(range(len(lines)))
    tok = get_tokenizer()
    for token_b64, rank in lines[:: len(lines) // 500]:
        assert tok.token_bytes(int(rank)) == base64.b64decode(token_b64)


def test_no_network_needed() -> None:
    code = (
        "import socket\n"
        "def no(*a, **k): raise OSError('network used')\n"
        "socket.socket.connect = no\nsocket.create_connection = no\n"
        "from stress.core.tokens import get_tokenizer\n"
        "print(get_tokenizer().name)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"TIKTOKEN_CACHE_DIR": "/nonexistent", "PATH": ""},
        timeout=60,
    )
    assert out.stdout.strip() == "tiktoken:cl100k_base", out.stderr


def test_estimate_is_labelled_and_rough() -> None:
    est = EstimateTokenizer()
    assert est.name.startswith("estimate")
    assert 20 <= est.count("word " * 20) <= 30
    assert est.count("你好世界") == 4


def test_long_texts_are_estimated_from_samples_within_a_few_percent() -> None:
    """A 10 MB reply counted exactly blocked the event loop for ~20 s (issue 12): past
    EXACT_COUNT_CHARS the count comes from samples, close to the exact count on prose."""
    from pathlib import Path

    from stress.core.tokens import EXACT_COUNT_CHARS, count_tokens, get_tokenizer

    corpus = Path(__file__).resolve().parents[2] / "corpora" / "en"
    text = "\n\n".join(p.read_text() for p in sorted(corpus.glob("*"))[:6])
    assert len(text) > 4 * EXACT_COUNT_CHARS
    exact = get_tokenizer().count(text)
    assert abs(count_tokens(text) - exact) / exact < 0.1
    short = text[:EXACT_COUNT_CHARS]
    assert count_tokens(short) == get_tokenizer().count(short)
    # the cost is bounded by the sample size, not the text: a 10 MB text counts at once
    assert count_tokens("word " * 2_000_000) > 1_000_000


def test_the_byte_length_table_is_each_tokens_own_length() -> None:
    """A corpus cut finds where a token ends from these lengths: every one must be the
    token's own (100,256 ordinary tokens, all checked)."""
    tok = get_tokenizer()
    assert isinstance(tok, TiktokenTokenizer)
    lengths = tok.byte_lengths()
    assert len(lengths) == 100_256
    assert all(lengths[t] == len(tok.token_bytes(t)) for t in range(len(lengths)))
    assert EstimateTokenizer().byte_lengths() is None
