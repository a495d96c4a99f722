"""SSE parsing of recorded real streams, split at every byte position."""

from __future__ import annotations

from pathlib import Path

import pytest

from stress.sse import SSEParser

FIXTURES = Path(__file__).parent / "fixtures" / "streams"


def parse_all(data: bytes, cuts: list[int]) -> list[bytes]:
    p = SSEParser()
    out: list[bytes] = []
    prev = 0
    for c in [*cuts, len(data)]:
        out += p.feed(data[prev:c])
        prev = c
    return out + p.close()


@pytest.mark.parametrize("name", ["llamacpp_cpu_sse.txt", "vllm_cpu_sse.txt"])
def test_every_split_point_gives_the_same_events(name: str) -> None:
    data = (FIXTURES / name).read_bytes()
    whole = parse_all(data, [])
    assert whole[-1] == b"[DONE]" and len(whole) > 10
    for i in range(1, len(data)):
        assert parse_all(data, [i]) == whole, f"split at byte {i}"


def test_crlf_comments_multiline_and_blank_data() -> None:
    data = (
        b': keep-alive\r\n\r\ndata: {"a":\r\ndata: 1}\r\n\r\n'
        b"data:\r\n\r\nevent: x\ndata: [DONE]\n\n"
    )
    for i in range(len(data)):
        assert parse_all(data, [i]) == [b'{"a":\n1}', b"", b"[DONE]"]


def test_byte_by_byte_with_multibyte_characters() -> None:
    data = 'data: {"c": "zażółć 你好"}\n\n'.encode()
    assert parse_all(data, list(range(1, len(data)))) == ['{"c": "zażółć 你好"}'.encode()]


def test_event_without_final_blank_line_is_kept_at_eof() -> None:
    assert parse_all(b"data: tail", []) == [b"tail"]
