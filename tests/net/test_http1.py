"""The chat requests' connection pool (``stress.net.http1``) against raw servers on loopback:
framing, interim replies, hostile heads, the limit, keep-alive and its end, TLS."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import time
from pathlib import Path

import orjson
import pytest

from stress.core.record import RequestRecord
from stress.net.client import ChatClient
from stress.net.deadlines import TimeoutPolicy
from stress.net.http1 import Endpoint, request_head
from tests.fakes import DONE, chunk, framed, raw, usage_chunk, writes

POLICY = TimeoutPolicy(connect=2, first_token=3, stall=2, total=6)
BODY = orjson.dumps({"model": "m", "messages": [], "stream": True})
SSE = chunk("hi", finish="stop") + usage_chunk(12, 1) + DONE


async def chats(
    url: str, n: int, *, limit: int = 4, reuse: bool = True, gap: float = 0.0
) -> list[RequestRecord]:
    client = ChatClient(url, {}, POLICY, limit=limit, reuse=reuse)
    out = []
    try:
        for i in range(n):
            rec = RequestRecord(user=0, conversation=1, round=i + 1, turn=i + 1)
            await client.chat(BODY, rec, time.perf_counter())
            out.append(rec)
            if gap:
                await asyncio.sleep(gap)
    finally:
        await client.close()
    return out


async def test_keep_alive_reuses_one_connection_and_sends_a_complete_head() -> None:
    async with raw(writes(framed(SSE))) as server:
        recs = await chats(f"http://127.0.0.1:{server.port}", 3)
    assert [r.outcome for r in recs] == ["ok"] * 3
    assert server.connections == 1
    head = server.heads[0].decode()
    assert head.startswith("POST /v1/chat/completions HTTP/1.1\r\n")
    for line in (
        f"Host: 127.0.0.1:{server.port}",
        "Content-Type: application/json",
        f"Content-Length: {len(BODY)}",
        "Accept-Encoding: identity",
    ):
        assert line in head.split("\r\n"), head


async def test_no_reuse_opens_a_connection_per_request_and_says_close() -> None:
    async with raw(writes(framed(SSE))) as server:
        recs = await chats(f"http://127.0.0.1:{server.port}", 3, reuse=False)
    assert [r.outcome for r in recs] == ["ok"] * 3
    assert server.connections == 3
    assert all(b"\r\nConnection: close\r\n" in h for h in server.heads)


async def test_interim_1xx_replies_are_skipped() -> None:
    data = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
    async with raw(writes(data + framed(SSE))) as server:
        [rec] = await chats(f"http://127.0.0.1:{server.port}", 1)
    assert rec.outcome == "ok" and rec.http_status == 200, rec.error


async def test_a_reply_framed_by_the_close_ends_when_the_server_closes() -> None:
    """HTTP/1.0 style: no length, not chunked; the body is everything until the close."""
    data = b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + SSE
    async with raw(writes(data, keep=False)) as server:
        recs = await chats(f"http://127.0.0.1:{server.port}", 2)
    assert [(r.outcome, r.chunks_content, r.reconnects) for r in recs] == [("ok", 1, 0)] * 2
    assert server.connections == 2  # never reused: the close was the reply's end


async def test_a_stream_cut_by_the_close_is_a_reset_that_keeps_what_came() -> None:
    data = framed(SSE)[:-40]  # promised more than it sent
    async with raw(writes(data, keep=False)) as server:
        [rec] = await chats(f"http://127.0.0.1:{server.port}", 1)
    assert rec.error_class == "reset" and rec.chunks_content == 1, rec.error
    assert rec.error is not None and "before the reply ended" in rec.error


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/1.1 200 OK\r\n" + b"X-Filler: " + b"a" * (100 << 10) + b"\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(200)) + b"\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    ],
    ids=["huge-head", "many-headers", "upgrade"],
)
async def test_hostile_heads_are_protocol_errors(data: bytes) -> None:
    async def reply(n: int, w: asyncio.StreamWriter) -> bool:
        w.write(data)
        await asyncio.sleep(1)  # keep the connection: the client must stop by itself
        return False

    async with raw(reply) as server:
        [rec] = await chats(f"http://127.0.0.1:{server.port}", 1)
    assert rec.outcome == "error" and rec.error_class == "protocol", rec.error
    assert rec.e2e_s is not None and rec.e2e_s < 1


async def test_bytes_on_an_idle_connection_retire_it() -> None:
    """A reply followed by bytes nobody asked for: the connection is not reused."""
    async with raw(writes(framed(SSE) + b"HTTP/1.1 200 OK\r\n")) as server:
        recs = await chats(f"http://127.0.0.1:{server.port}", 2, gap=0.1)
    assert [r.outcome for r in recs] == ["ok"] * 2
    assert server.connections == 2


async def test_the_limit_bounds_open_connections_and_the_rest_wait() -> None:
    async def slow(n: int, w: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(0.1)
        w.write(framed(SSE))
        return True

    async with raw(slow) as server:
        client = ChatClient(f"http://127.0.0.1:{server.port}", {}, POLICY, limit=3)
        recs = [RequestRecord(user=u, conversation=1, round=1, turn=1) for u in range(9)]
        await asyncio.gather(*(client.chat(BODY, r, time.perf_counter()) for r in recs))
        open_after = client.pool.open_connections
        await client.close()
    assert [r.outcome for r in recs] == ["ok"] * 9
    assert server.most_open == 3 and server.connections == 3
    assert open_after == 3 and len(server.heads) == 9


async def test_waiters_are_served_in_order_and_their_wait_is_queueing_not_ttft() -> None:
    """One connection, a reply of 0.2 s, four requests sent 0.01 s apart: each is served in
    the order it asked, none overtakes a waiter (a user that just finished and asks again
    goes to the back), and the wait for the connection is ``queue_s``, never TTFT."""
    reply_s = 0.2

    async def slow(n: int, w: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(reply_s)
        w.write(framed(SSE))
        return True

    async with raw(slow) as server:
        client = ChatClient(f"http://127.0.0.1:{server.port}", {}, POLICY, limit=1)
        order: list[int] = []

        async def user(u: int, delay: float) -> RequestRecord:
            await asyncio.sleep(delay)
            rec = RequestRecord(user=u, conversation=1, round=1, turn=1)
            await client.chat(BODY, rec, time.perf_counter())
            order.append(u)
            if u == 0:  # asks again at once: behind the three already waiting
                again = RequestRecord(user=0, conversation=1, round=2, turn=2)
                await client.chat(BODY, again, time.perf_counter())
                order.append(10)
            return rec

        recs = await asyncio.gather(*(user(u, 0.01 * u) for u in range(4)))
        await client.close()
    assert order == [0, 1, 2, 3, 10]
    assert [r.outcome for r in recs] == ["ok"] * 4
    for r in recs:  # the server answers each in ~reply_s once it has it
        assert r.ttft_s is not None and r.ttft_s < 2 * reply_s, (r.user, r.ttft_s)
    waits = [r.queue_s for r in recs]
    assert waits[0] < reply_s / 2
    assert all(w > reply_s / 2 for w in waits[1:]), waits  # the wait is there, as queueing


async def test_connections_closed_or_idle_too_long_are_never_reused() -> None:
    async with raw(writes(framed(SSE))) as server:
        client = ChatClient(f"http://127.0.0.1:{server.port}", {}, POLICY, limit=4)
        pool = client.pool  # the client's own pool, with a shorter keep-alive
        pool.keepalive_s = 0.2
        for _ in range(2):
            rec = RequestRecord(user=0, conversation=1, round=1, turn=1)
            await client.chat(BODY, rec, time.perf_counter())
            assert rec.outcome == "ok"
            assert pool.idle_connections == 1
            await asyncio.sleep(0.3)  # past keepalive_s: the next request opens a new one
        await client.close()
    assert server.connections == 2


async def test_an_idle_connection_the_server_closes_leaves_the_pool() -> None:
    async with raw(writes(framed(SSE), keep=False)) as server:
        client = ChatClient(f"http://127.0.0.1:{server.port}", {}, POLICY, limit=4)
        rec = RequestRecord(user=0, conversation=1, round=1, turn=1)
        await client.chat(BODY, rec, time.perf_counter())
        for _ in range(100):
            if client.pool.open_connections == 0:
                break
            await asyncio.sleep(0.01)
        assert rec.outcome == "ok"
        assert client.pool.open_connections == 0 and client.pool.idle_connections == 0
        await client.close()


def test_a_header_with_a_line_break_is_refused_without_its_value() -> None:
    ep = Endpoint.parse("http://127.0.0.1:8000/base")
    with pytest.raises(ValueError) as e:
        request_head(ep, "/v1/x", {"Authorization": "Bearer sk-secret\r\nX: y"}, close=False)
    assert "Authorization" in str(e.value) and "sk-secret" not in str(e.value)
    head = request_head(ep, "/v1/x", {"content-type": "text/plain"}, close=False)
    assert head.startswith(b"POST /base/v1/x HTTP/1.1\r\n")
    assert b"content-type: text/plain\r\n" in head and b"application/json" not in head


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("http://example.com", "example.com"),
        ("https://example.com:443/", "example.com"),
        ("http://[::1]:8000", "[::1]:8000"),
        ("http://h:81/p/", "h:81"),
    ],
)
def test_host_header(url: str, host: str) -> None:
    assert Endpoint.parse(url).host_header == host


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


async def test_tls_verifies_the_server_and_trusts_ssl_cert_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTPS: a certificate nobody vouches for is a ``connect`` error naming why; once the
    user trusts it (``SSL_CERT_FILE``, as OpenSSL reads it), the same server answers."""
    cert, key = _self_signed(tmp_path)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    async with raw(writes(framed(SSE)), tls) as server:
        url = f"https://127.0.0.1:{server.port}"
        [refused] = await chats(url, 1)
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        [trusted] = await chats(url, 1)
    assert refused.error_class == "connect" and refused.error is not None
    assert "CERTIFICATE_VERIFY_FAILED" in refused.error or "certificate" in refused.error
    assert trusted.outcome == "ok", trusted.error


async def test_an_error_status_then_a_close_is_the_error_not_a_reset() -> None:
    """A server that refuses a body it will not read (HTTP 413), then drops the connection
    before its promised error body ends: the record says 413, as the server did."""
    data = b'HTTP/1.1 413 Payload Too Large\r\nContent-Length: 100\r\n\r\n{"error": "too big"'
    async with raw(writes(data, keep=False)) as server:
        [rec] = await chats(f"http://127.0.0.1:{server.port}", 1)
    assert rec.error_class == "http_4xx" and rec.http_status == 413, rec.error
    assert rec.error is not None and rec.error.startswith("HTTP 413")
