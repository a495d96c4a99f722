"""SSE parsing of recorded real streams, split at every byte position."""

from __future__ import annotations

from pathlib import Path

import pytest

from stress.net.sse import MAX_EVENT_BYTES, SSEError, SSEParser

FIXTURES = Path(__file__).parents[1] / "fixtures" / "streams"


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


def test_cr_only_line_ends_parse_like_lf() -> None:
    """CR alone ends a line in SSE; a CR closing one read may meet its LF in the next."""
    lf = b': hi\n\ndata: {"a":\ndata: 1}\n\ndata: [DONE]\n\n'
    expected = [b'{"a":\n1}', b"[DONE]"]
    for data in (lf.replace(b"\n", b"\r"), lf.replace(b"\n", b"\r\n")):
        for i in range(len(data)):
            assert parse_all(data, [i]) == expected, f"split at byte {i}"
        assert parse_all(data, list(range(1, len(data)))) == expected


def test_cr_then_lf_in_the_next_read_is_one_line_end() -> None:
    # "\r" | "\n\r" | "\n": two line ends (CRLF, CRLF), one event; not three
    assert parse_all(b"data: x\r\n\r\n", [8, 10]) == [b"x"]


def test_a_long_line_in_small_reads_is_parsed_in_linear_time() -> None:
    """Checked by structure, not timed: while a line is incomplete the parser holds the
    reads it was given, never one growing copy (the old parser re-copied and re-searched the
    whole line on every read: a 10 MB line in 4 KiB reads took seconds)."""
    size = 2_000_000
    data = b"data: " + b"x" * size + b"\n\ndata: y\n\n"
    p = SSEParser()
    out: list[bytes] = []
    for i in range(0, len(data), 4096):
        out += p.feed(data[i : i + 4096])
        held = getattr(p, "_pending", None)
        assert isinstance(held, list) and all(len(x) <= 4096 for x in held)
    assert out == [b"x" * size, b"y"]


def test_a_line_past_the_limit_is_refused_and_memory_released() -> None:
    p = SSEParser()
    piece = b"x" * 65536
    p.feed(b"data: ")
    with pytest.raises(SSEError, match="longer than 16 MiB"):
        for _ in range(MAX_EVENT_BYTES // len(piece) + 2):
            p.feed(piece)
    assert p._pending == [] and p._pending_len == 0


def test_an_event_of_many_data_lines_past_the_limit_is_refused() -> None:
    p = SSEParser()
    line = b"data: " + b"x" * 65536 + b"\n"
    with pytest.raises(SSEError, match="event longer than"):
        for _ in range(MAX_EVENT_BYTES // len(line) + 2):
            p.feed(line)
    assert p._more is None and p._data is None
