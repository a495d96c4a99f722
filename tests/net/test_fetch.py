"""The probe's and the scrapes' requests (``stress.net.fetch``) against raw servers on loopback
that answer, redirect, drop, cut short, stall and overflow."""

from __future__ import annotations

import asyncio
import socket

import orjson
import pytest

from stress.net.fetch import Fetcher, FetchError
from tests.fakes import framed, raw, writes

JSON = b'{"data": [{"id": "m"}]}'


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_gets_reuse_one_connection_and_read_the_whole_answer() -> None:
    reply = framed(JSON, ctype=b"application/json; charset=utf-8")
    async with raw(writes(reply)) as server, Fetcher() as f:
        url = f"http://127.0.0.1:{server.port}"
        got = [await f.get(url + "/v1/models?x=1", {"X-Probe": "1"}, 5) for _ in range(3)]
    assert [(r.status, r.body, r.content_type) for r in got] == [
        (200, JSON, "application/json")
    ] * 3
    assert got[0].json() == {"data": [{"id": "m"}]}
    assert server.connections == 1
    lines = server.heads[0].decode().split("\r\n")
    assert lines[0] == "GET /v1/models?x=1 HTTP/1.1"
    assert f"Host: 127.0.0.1:{server.port}" in lines and "X-Probe: 1" in lines
    assert not any(line.lower().startswith(("content-type", "content-length")) for line in lines)


async def test_no_reuse_opens_a_connection_per_request() -> None:
    async with raw(writes(framed(JSON))) as server, Fetcher(reuse=False) as f:
        for _ in range(3):
            await f.get(f"http://127.0.0.1:{server.port}/health", {}, 5)
    assert server.connections == 3
    assert all(b"\r\nConnection: close\r\n" in h for h in server.heads)


async def test_a_post_sends_its_json_body() -> None:
    body = {"model": "m", "prompt": "héllo"}
    answer = framed(b'{"count": 2}', ctype=b"application/json")
    async with raw(writes(answer)) as server, Fetcher() as f:
        resp = await f.request("POST", f"http://127.0.0.1:{server.port}/tokenize", {}, 5, body)
    assert resp.json() == {"count": 2}
    lines = server.heads[0].decode().split("\r\n")
    assert lines[0] == "POST /tokenize HTTP/1.1"
    assert "Content-Type: application/json" in lines
    assert f"Content-Length: {len(orjson.dumps(body))}" in lines


async def test_a_redirect_is_the_answer_never_followed() -> None:
    reply = (
        b"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://elsewhere/v1\r\n"
        b"Content-Length: 0\r\n\r\n"
    )
    async with raw(writes(reply)) as server, Fetcher() as f:
        resp = await f.get(f"http://127.0.0.1:{server.port}/v1/models", {"Authorization": "k"}, 5)
    assert (resp.status, resp.location, resp.body) == (307, "http://elsewhere/v1", b"")
    assert len(server.heads) == 1


async def test_a_pooled_connection_dropped_before_a_byte_is_sent_again_once() -> None:
    async def reply(n: int, w: asyncio.StreamWriter) -> bool:
        if n == 2:  # the server closed the kept-alive connection as the request came
            return False
        w.write(framed(JSON))
        return True

    async with raw(reply) as server, Fetcher() as f:
        url = f"http://127.0.0.1:{server.port}/metrics"
        first = await f.get(url, {}, 5)
        second = await f.get(url, {}, 5)
    assert first.body == second.body == JSON
    assert len(server.heads) == 3 and server.connections == 2


async def test_a_reply_cut_short_is_an_error_not_a_short_body() -> None:
    cut = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 10
    async with raw(writes(cut, keep=False)) as server, Fetcher() as f:
        with pytest.raises(FetchError) as err:
            await f.get(f"http://127.0.0.1:{server.port}/metrics", {}, 5)
    assert (err.value.kind, err.value.reason) == ("disconnected", "server disconnected")


async def test_a_stall_ends_at_the_timeout_and_the_connection_is_not_kept() -> None:
    async def reply(n: int, w: asyncio.StreamWriter) -> bool:
        if n == 1:
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nxx")  # then nothing
            await asyncio.sleep(30)
        w.write(framed(JSON))
        return True

    async with raw(reply) as server, Fetcher() as f:
        url = f"http://127.0.0.1:{server.port}/metrics"
        with pytest.raises(FetchError) as err:
            await f.get(url, {}, 0.3)
        assert err.value.kind == "timeout" and "0.3s" in str(err.value)
        assert (await f.get(url, {}, 5)).body == JSON  # on a new connection
    assert server.connections == 2


async def test_a_body_past_the_limit_is_an_error() -> None:
    async with raw(writes(framed(b"x" * 5000))) as server, Fetcher(max_body=1000) as f:
        with pytest.raises(FetchError) as err:
            await f.get(f"http://127.0.0.1:{server.port}/metrics", {}, 5)
    assert err.value.kind == "too_large"


async def test_a_refused_connection_says_why_and_a_bad_url_is_named() -> None:
    async with Fetcher(2.0) as f:
        with pytest.raises(FetchError) as err:
            await f.get(f"http://127.0.0.1:{_free_port()}/health", {}, 5)
        assert (err.value.kind, err.value.reason) == ("connect", "Connection refused")
        assert err.value.short == "cannot connect: Connection refused"  # what a run says
        with pytest.raises(FetchError) as bad:
            await f.get("ftp://127.0.0.1/health", {}, 5)
        assert bad.value.kind == "url"


async def test_a_header_with_a_line_break_is_refused_without_its_value() -> None:
    async with Fetcher() as f:
        with pytest.raises(FetchError) as err:
            await f.get("http://127.0.0.1:9/x", {"Authorization": "Bearer sk-secret\r\nX: y"}, 5)
    assert err.value.kind == "url" and "sk-secret" not in str(err.value)
