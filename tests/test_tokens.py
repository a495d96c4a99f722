"""The shipped tokenizer works offline and matches tiktoken's cl100k_base."""

from __future__ import annotations

import subprocess
import sys

from stress.tokens import EstimateTokenizer, get_tokenizer


def test_shipped_cl100k_works_offline_with_known_counts() -> None:
    tok = get_tokenizer()
    assert tok.name == "tiktoken:cl100k_base"
    assert tok.encode("hello world") == [15339, 1917]  # cl100k_base ids
    assert tok.decode(tok.encode("zażółć gęślą jaźń 你好")) == "zażółć gęślą jaźń 你好"


def test_no_network_needed() -> None:
    code = (
        "import socket\n"
        "def no(*a, **k): raise OSError('network used')\n"
        "socket.socket.connect = no\nsocket.create_connection = no\n"
        "from stress.tokens import get_tokenizer\n"
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
