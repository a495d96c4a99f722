"""The streaming client against scripted servers on loopback: fields, timing, outcomes."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from stress.client import ChatClient, TimeoutPolicy
from stress.record import RequestRecord
from tests.fakes import DONE, FakeServer, chunk, serve, stream, usage_chunk

POLICY = TimeoutPolicy(connect=2, first_token=2, stall=1, total=5)
BODY = orjson.dumps({"model": "m", "messages": [], "stream": True})


async def one(server: FakeServer, policy: TimeoutPolicy = POLICY) -> tuple[RequestRecord, str]:
    async with serve(server), aiohttp.ClientSession() as session:
        client = ChatClient(
            session,
            server.url,
            {},
            policy,
            fresh_session=lambda: aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True)
            ),
        )
        rec = RequestRecord(user=0, conversation=1, round=1, turn=1)
        reply = await client.chat(BODY, rec, time.perf_counter())
        await client.close()
        return rec, reply.content


def scripted(
    parts: list[bytes],
    delay: float = 0.0,
    status: int = 200,
    content_type: str = "text/event-stream",
) -> FakeServer:
    async def script(request: web.Request, body: dict[str, Any], n: int) -> web.StreamResponse:
        return await stream(request, parts, delay=delay, status=status, content_type=content_type)

    return FakeServer(script=script)


async def test_ok_stream_counts_and_times() -> None:
    parts = [chunk("a"), chunk("b"), chunk("c", finish="stop"), usage_chunk(50, 3, cached=32), DONE]
    rec, text = await one(scripted(parts, delay=0.02))
    assert rec.outcome == "ok" and text == "abc"
    assert (rec.chunks_content, rec.chunks_reasoning) == (3, 0)
    assert rec.completion_tokens == 3 and rec.tokens_source == "usage"
    assert rec.prompt_tokens == 50 and rec.cached_tokens == 32 and rec.cache_source == "usage"
    assert rec.ttft_s is not None and rec.e2e_s is not None and rec.ttft_s < rec.e2e_s
    assert rec.ttfc_s == rec.ttft_s
    # 2 tokens after the first in ~2 delays
    assert rec.decode_tok_s is not None and 10 < rec.decode_tok_s < 200
    assert rec.saw_done and rec.finish_reason == "stop"


@pytest.mark.parametrize("field_name", ["reasoning", "reasoning_content"])
async def test_reasoning_fields_are_read_and_ttft_is_first_reasoning(field_name: str) -> None:
    parts = [
        chunk(reasoning="think", field_name=field_name),
        chunk(reasoning="ing", field_name=field_name),
        chunk("answer", finish="stop"),
        DONE,
    ]
    rec, text = await one(scripted(parts, delay=0.05))
    assert rec.outcome == "ok" and text == "answer"
    assert rec.reasoning_field == field_name
    assert (rec.chunks_reasoning, rec.chunks_content) == (2, 1)
    assert rec.ttft_s is not None and rec.ttfc_s is not None
    assert rec.ttfc_s - rec.ttft_s > 0.05  # content came two chunks after the thinking began
    assert rec.tokens_source == "chunks" and rec.completion_tokens == 3


async def test_reasoning_only_with_length_is_diagnosed() -> None:
    parts = [chunk(reasoning="hmm"), chunk(reasoning="...", finish="length"), DONE]
    rec, _ = await one(scripted(parts))
    assert rec.outcome == "reasoning_only"
    assert rec.diagnosis is not None and "max_tokens" in rec.diagnosis


async def test_empty_reply_is_not_success() -> None:
    parts = [chunk(""), chunk(None, finish="stop"), usage_chunk(10, 0), DONE]
    rec, _ = await one(scripted(parts))
    assert rec.outcome == "empty" and rec.chunks_content == 0 and rec.chunks_empty == 3


async def test_truncated_stream() -> None:
    rec, _ = await one(scripted([chunk("a"), chunk("b")]))
    assert rec.outcome == "truncated" and not rec.saw_done


async def test_malformed_chunk() -> None:
    rec, _ = await one(
        scripted([chunk("a"), b"data: {not json\n\n", chunk("b", finish="stop"), DONE])
    )
    assert rec.outcome == "error" and rec.error_class == "malformed_stream"


async def test_error_object_inside_stream() -> None:
    err = b'data: {"error": {"message": "engine crashed", "code": 500}}\n\n'
    rec, _ = await one(scripted([chunk("a"), err, DONE]))
    assert rec.error_class == "stream_error" and "engine crashed" in (rec.error or "")


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (500, b'{"error": {"message": "boom"}}', "http_5xx"),
        (503, b"busy", "http_5xx"),
        (404, b'{"detail": "no route"}', "http_4xx"),
        (
            400,
            b'{"error":{"code":400,"message":"the request exceeds the available context size",'
            b'"type":"exceed_context_size_error"}}',
            "context_exceeded",
        ),
        (
            400,
            b'{"error": {"message": "This model\'s maximum context length is 4096 tokens"}}',
            "context_exceeded",
        ),
    ],
)
async def test_http_errors_are_classified(status: int, body: bytes, expected: str) -> None:
    rec, _ = await one(scripted([body], status=status, content_type="application/json"))
    assert rec.outcome == "error" and rec.error_class == expected
    assert rec.http_status == status and rec.error and f"HTTP {status}" in rec.error


async def test_429_keeps_retry_after() -> None:
    async def script(request: web.Request, body: dict[str, Any], n: int) -> web.StreamResponse:
        return web.json_response(
            {"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "7"}
        )

    rec, _ = await one(FakeServer(script=script))
    assert rec.error_class == "http_429" and rec.retry_after_s == 7.0


async def test_stall_after_first_token() -> None:
    async def script(request: web.Request, body: dict[str, Any], n: int) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(chunk("a"))
        await asyncio.sleep(3)
        return resp

    rec, text = await one(FakeServer(script=script), TimeoutPolicy(2, 2, 0.3, 5))
    assert rec.error_class == "stall"
    assert text == "a" and rec.content_chars == 1 and rec.completion_tokens == 1
    assert rec.e2e_s is not None and rec.e2e_s < 2.5  # the server would have waited 3 s
    assert rec.chunks_content == 1


async def test_keepalive_bytes_do_not_count_as_first_token() -> None:
    async def script(request: web.Request, body: dict[str, Any], n: int) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for _ in range(10):
            await resp.write(b": keep-alive\n\n")
            await asyncio.sleep(0.1)
        return resp

    rec, _ = await one(FakeServer(script=script), TimeoutPolicy(2, 0.4, 5, 5))
    assert rec.error_class == "first_token_timeout" and rec.ttft_s is None


async def test_total_timeout() -> None:
    parts = [chunk(str(i)) for i in range(100)]
    rec, _ = await one(scripted(parts, delay=0.05), TimeoutPolicy(2, 2, 2, 0.5))
    assert rec.error_class == "total_timeout"


async def test_connect_refused() -> None:
    async with aiohttp.ClientSession() as session:
        client = ChatClient(session, "http://127.0.0.1:1", {}, POLICY)
        rec = RequestRecord(user=0, conversation=1, round=1, turn=1)
        await client.chat(BODY, rec, time.perf_counter())
    assert rec.error_class == "connect" and rec.outcome == "error"


async def test_reset_mid_stream() -> None:
    async def script(request: web.Request, body: dict[str, Any], n: int) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(chunk("a"))
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.abort()
        return resp

    rec, _ = await one(FakeServer(script=script))
    assert rec.error_class == "reset" and rec.chunks_content == 1


async def test_llamacpp_timings_give_cache_when_usage_lacks_it() -> None:
    timings = {"cache_n": 96, "prompt_n": 20, "predicted_n": 2}
    parts = [chunk("a"), chunk("b", finish="stop"), usage_chunk(116, 2, timings=timings), DONE]
    rec, _ = await one(scripted(parts))
    assert rec.cached_tokens == 96 and rec.cache_source == "timings"


async def test_cancellation_is_recorded_then_propagates() -> None:
    parts = [chunk(str(i)) for i in range(100)]
    async with serve(scripted(parts, delay=0.05)) as server, aiohttp.ClientSession() as s:
        client = ChatClient(s, server.url, {}, POLICY)
        rec = RequestRecord(user=0, conversation=1, round=1, turn=1)
        task = asyncio.create_task(client.chat(BODY, rec, time.perf_counter()))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert rec.error_class == "cancelled" and rec.outcome == "error" and rec.chunks_content > 0


async def _closing_server() -> tuple[asyncio.Server, int, list[int]]:
    """Answers the first request on each connection, then drops the connection as soon as
    a second request arrives on it, without a byte of reply (a server that closed an idle
    keep-alive connection under the client's feet)."""
    served: list[int] = []
    body = chunk("hi", finish="stop") + DONE

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        n = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                n += 1
                if n > 1:
                    writer.close()
                    return
                served.append(1)
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    return srv, srv.sockets[0].getsockname()[1], served


async def test_dead_pooled_connection_is_retried_once_on_a_fresh_one() -> None:
    srv, port, served = await _closing_server()
    async with srv, aiohttp.ClientSession() as session:
        client = ChatClient(
            session,
            f"http://127.0.0.1:{port}",
            {},
            POLICY,
            fresh_session=lambda: aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True)
            ),
        )
        records = []
        for _ in range(3):
            rec = RequestRecord(user=0, conversation=1, round=1, turn=1)
            await client.chat(BODY, rec, time.perf_counter())
            records.append(rec)
        await client.close()
    assert [r.outcome for r in records] == ["ok", "ok", "ok"]
    assert records[0].reconnects == 0
    assert records[1].reconnects == 1  # the pooled connection was dead: one fresh retry
    assert len(served) == 3


async def test_non_streamed_reply_is_flagged() -> None:
    async def script(request: web.Request, body: dict[str, Any], n: int) -> web.StreamResponse:
        return web.json_response(
            {
                "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 1},
            }
        )

    rec, text = await one(FakeServer(script=script))
    assert text == "hi" and rec.outcome == "ok" and rec.streamed is False
