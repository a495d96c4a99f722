"""The streaming client against scripted servers on loopback: fields, timing, outcomes."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from stress.core.record import RequestRecord
from stress.net.client import ChatClient, _check_ok
from stress.net.deadlines import TimeoutPolicy
from stress.net.sse import MAX_EVENT_BYTES
from tests.fakes import DONE, FakeServer, chunk, read_request, serve, stream, usage_chunk

ROOT = Path(__file__).resolve().parents[2]
POLICY = TimeoutPolicy(connect=2, first_token=2, stall=1, total=5)
BODY = orjson.dumps({"model": "m", "messages": [], "stream": True})


async def one(server: FakeServer, policy: TimeoutPolicy = POLICY) -> tuple[RequestRecord, str]:
    async with serve(server):
        client = ChatClient(server.url, {}, policy, limit=8)
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
    # 2 tokens after the first, at least 2 delays of 0.02 s apart: at most ~50 tok/s (no
    # lower bound: a busy machine only makes the gaps longer)
    assert rec.decode_tok_s is not None and 0 < rec.decode_tok_s <= 60
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
    client = ChatClient("http://127.0.0.1:1", {}, POLICY, limit=8)
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
    async with serve(scripted(parts, delay=0.05)) as server:
        client = ChatClient(server.url, {}, POLICY, limit=8)
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
                await read_request(reader)
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
    async with srv:
        client = ChatClient(f"http://127.0.0.1:{port}", {}, POLICY, limit=8)
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


# --- a raw HTTP/1.1 server on loopback, for what aiohttp's own server will not do ---------


@dataclass
class RawServer:
    """Answers GET /v1/models and POST /v1/chat/completions with keep-alive, from bytes.

    With ``drop_reused`` it answers only the first request on each connection: a chat
    request that arrives on a connection that already served one meets a closed socket (no
    byte of reply). That is what a server that closes idle keep-alive connections
    (llama-server after 5 s) does to a client that picks the pooled connection at that
    moment, made certain instead of left to a race.
    """

    chat_reply: bytes = b""
    drop_reused: bool = False
    idle_close_s: float | None = None
    """Close a connection that stays idle this long after an answer (llama-server: 5 s)."""
    served: int = 0
    dropped: int = 0
    idle_closed: int = 0
    port: int = 0
    request_ids: list[str | None] = field(default_factory=list)
    """The X-Request-ID of every chat request that arrived, dropped ones included."""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        answered = 0
        try:
            while True:
                first = b""
                if answered and self.idle_close_s is not None:
                    try:
                        first = await asyncio.wait_for(reader.readexactly(1), self.idle_close_s)
                    except TimeoutError:
                        self.idle_closed += 1
                        return
                head = await read_request(reader, first)
                request_line, *lines = head.split(b"\r\n")
                method, path = request_line.split(b" ")[:2]
                if path == b"/v1/chat/completions":
                    ids = [v for k, _, v in (x.partition(b":") for x in lines)
                           if k.lower() == b"x-request-id"]  # fmt: skip
                    self.request_ids.append(ids[0].strip().decode() if ids else None)
                if path == b"/v1/models":
                    reply = _http(200, "application/json", b'{"data": [{"id": "raw-model"}]}')
                elif path == b"/v1/chat/completions" and method == b"POST":
                    if self.drop_reused and answered:
                        self.dropped += 1
                        writer.transport.abort()
                        return
                    self.served += 1
                    reply = self.chat_reply or _http(200, "text/event-stream", GOOD_SSE)
                else:
                    reply = _http(404, "text/plain", b"no")
                answered += 1
                writer.write(reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()


GOOD_SSE = chunk("hi", finish="stop") + usage_chunk(12, 1) + DONE


def _http(status: int, ctype: str, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
        "Connection: keep-alive\r\n\r\n"
    )
    return head.encode() + body


@contextlib.asynccontextmanager
async def raw_server(server: RawServer) -> AsyncIterator[RawServer]:
    srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    server.port = srv.sockets[0].getsockname()[1]
    async with srv:
        yield server


async def run_chats(url: str, n: int, policy: TimeoutPolicy = POLICY) -> list[RequestRecord]:
    """``n`` requests in a row through the client and pool ``stress run`` uses."""
    client = ChatClient(url, {}, policy, limit=8)
    records = []
    try:
        for _ in range(n):
            rec = RequestRecord(user=0, conversation=1, round=1, turn=1)
            await client.chat(BODY, rec, time.perf_counter())
            records.append(rec)
    finally:
        await client.close()
    return records


async def test_idle_keepalive_connections_closed_by_the_server_cost_nothing() -> None:
    """The server closes each connection a moment after answering; the next request goes
    out after that, on whatever the pool kept: it must still be answered."""
    idle = 0.05
    async with raw_server(RawServer(idle_close_s=idle)) as server:
        url = f"http://127.0.0.1:{server.port}"
        client = ChatClient(url, {}, POLICY, limit=4)
        records = []
        try:
            for _ in range(3):
                rec = RequestRecord(user=0, conversation=1, round=1, turn=1)
                await client.chat(BODY, rec, time.perf_counter())
                records.append(rec)
                while server.idle_closed < len(records):  # until the server closed it
                    await asyncio.sleep(idle)
        finally:
            await client.close()
    assert [(r.outcome, r.http_status) for r in records] == [("ok", 200)] * 3
    assert server.served == 3


async def test_dead_keepalive_connection_is_retried_on_a_fresh_connection() -> None:
    """A request whose pooled connection the server dropped without a byte of reply goes
    out again once, on a new connection: a true ``ok``, with its status, never a fake one."""
    async with raw_server(RawServer(drop_reused=True)) as server:
        records = await run_chats(f"http://127.0.0.1:{server.port}", 4)
    assert [r.outcome for r in records] == ["ok"] * 4
    assert all(r.http_status == 200 and r.e2e_s is not None for r in records)
    assert sum(r.reconnects for r in records) == server.dropped >= 1
    assert server.served == 4


@pytest.mark.parametrize(
    "scenario_extra",
    ["", "connection: {reuse: false}\n"],
    ids=["reuse", "no-reuse"],
)
@pytest.mark.slow
async def test_cli_run_survives_dropped_keepalive_connections(
    tmp_path: Path, scenario_extra: str
) -> None:
    """The real CLI against a server that drops reused connections: every request ok."""
    async with raw_server(RawServer(drop_reused=True)) as server:
        path = tmp_path / "s.yaml"
        path.write_text(
            "name: dropper\n"
            'target: {url: "http://127.0.0.1:1"}\n'
            "users: {count: 2, ramp_up: 0s, think_time: {min: 0.01s, max: 0.02s}}\n"
            "rounds: 3\n"
            "warmup: {rounds: 0}\n"
            "conversation: {turn: {ask: [Hello there]}}\n"
            "request: {max_tokens: 8}\n" + scenario_extra
        )
        proc = await asyncio.create_subprocess_exec(
            str(ROOT / ".venv" / "bin" / "stress"),
            "run",
            str(path),
            "--target",
            f"http://127.0.0.1:{server.port}",
            "--no-tui",
            "--out",
            str(tmp_path / "out"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout=100)
    assert proc.returncode == 0, stderr.decode()
    [run] = [p for p in (tmp_path / "out").iterdir() if p.is_dir()]
    recs = [orjson.loads(x) for x in (run / "requests.jsonl").read_bytes().splitlines()]
    assert len(recs) == 6
    assert all(r["outcome"] == "ok" and r["http_status"] == 200 for r in recs), recs
    assert sorted((r["user"], r["round"]) for r in recs) == [
        (u, n) for u in (0, 1) for n in (1, 2, 3)
    ]
    if scenario_extra:  # a connection per request: nothing is reused, nothing dropped
        assert server.dropped == 0
    else:
        assert sum(r["reconnects"] for r in recs) == server.dropped >= 1
    assert b"Traceback" not in stdout + stderr


# --- watchdog ----------------------------------------------------------------------------


async def test_silence_after_the_first_token_is_a_stall_even_when_the_stream_resumes() -> None:
    """First-token and total deadlines far away: only a stall deadline re-armed from the
    last byte can catch this silence (the stream resumes and would end ``ok``)."""
    stall = 0.3
    silence = 10 * stall

    async def script(request: web.Request, body: dict[str, Any], n: int) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(chunk("a"))
        await asyncio.sleep(silence)
        with contextlib.suppress(ConnectionError):
            await resp.write(chunk("b", finish="stop") + DONE)
        return resp

    rec, text = await one(FakeServer(script=script), TimeoutPolicy(5, 60, stall, 600))
    assert rec.error_class == "stall" and rec.outcome == "error" and text == "a"
    assert rec.max_gap_s is not None and rec.max_gap_s >= stall
    assert rec.t_last_byte is not None and rec.t_last_byte >= rec.t_start


async def test_steady_stream_longer_than_the_stall_limit_is_not_a_stall() -> None:
    parts = [chunk(str(i)) for i in range(12)] + [chunk(".", finish="stop"), DONE]
    rec, _ = await one(scripted(parts, delay=0.05), TimeoutPolicy(5, 5, 0.5, 60))
    assert rec.outcome == "ok", rec.error


# --- what the server sent is not a chat reply ----------------------------------------------


async def test_html_200_is_a_protocol_error_naming_the_content_type() -> None:
    page = b"<html><body>Welcome to nginx!</body></html>"
    rec, _ = await one(scripted([page], content_type="text/html"))
    assert rec.outcome == "error" and rec.error_class == "protocol"
    assert rec.error is not None and "text/html" in rec.error and rec.http_status == 200


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 abc OK\r\nContent-Length: 0\r\n\r\n",
        b"SMTP ready\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n",
        bytes(range(14, 256)) * 16 + b"\r\n\r\n",
    ],
    ids=["status-code", "status-line", "header", "garbage"],
)
async def test_unparsable_http_reply_is_a_protocol_error(raw: bytes) -> None:
    async with raw_server(RawServer(chat_reply=raw)) as server:
        [rec] = await run_chats(f"http://127.0.0.1:{server.port}", 1)
    assert rec.outcome == "error" and rec.error_class == "protocol", rec.error
    assert rec.error is not None and "\n" not in rec.error and rec.http_status is None
    assert rec.reconnects == 0


async def test_redirect_is_never_followed_and_names_the_host_only() -> None:
    async def script(request: web.Request, body: dict[str, Any], n: int) -> web.StreamResponse:
        assert request.url.port is not None
        where = f"http://user:pw@127.0.0.1:{request.url.port}/v1/chat/completions?key=s3cret"
        return web.Response(status=307, headers={"Location": where})

    server = FakeServer(script=script)
    rec, _ = await one(server)
    assert rec.outcome == "error" and rec.error_class == "redirect" and rec.http_status == 307
    assert rec.error is not None and "127.0.0.1:" in rec.error
    assert "pw" not in rec.error and "s3cret" not in rec.error and "/v1/" not in rec.error
    assert len(server.requests) == 1  # not followed


# --- numbers from the server ---------------------------------------------------------------


async def test_token_counts_that_are_not_counts_are_ignored_and_named() -> None:
    bad_usage = (
        b'data: {"choices": [], "usage": {"prompt_tokens": -5, '
        b'"completion_tokens": 18446744073709551615, '
        b'"prompt_tokens_details": {"cached_tokens": 1e400}, '
        b'"completion_tokens_details": {"reasoning_tokens": true}}, '
        b'"timings": {"prompt_n": 18446744073709551615, "cache_n": 3, "prompt_ms": 1.5}}\n\n'
    )
    parts = [chunk("a"), chunk("b", finish="stop"), bad_usage, DONE]
    rec, text = await one(scripted(parts))
    assert rec.outcome == "ok" and text == "ab"
    assert rec.completion_tokens == 2 and rec.tokens_source == "chunks"
    assert rec.prompt_tokens is None and rec.prompt_source == "estimate"
    assert rec.cached_tokens == 3 and rec.cache_source == "timings"  # the one sane number
    assert rec.server_timings == {"cache_n": 3, "prompt_ms": 1.5}
    assert rec.diagnosis is not None
    for named in (
        "usage.prompt_tokens=-5",
        "usage.completion_tokens=18446744073709551615",
        "usage.prompt_tokens_details.cached_tokens=inf",
        "usage.completion_tokens_details.reasoning_tokens=True",
        "timings.prompt_n",
    ):
        assert named in rec.diagnosis
    assert orjson.loads(orjson.dumps(rec))["completion_tokens"] == 2


async def test_cached_above_prompt_is_rejected() -> None:
    parts = [chunk("a", finish="stop"), usage_chunk(100, 1, cached=1000), DONE]
    rec, _ = await one(scripted(parts))
    assert rec.prompt_tokens == 100 and rec.cached_tokens is None
    assert rec.diagnosis is not None and "cached_tokens=1000 > prompt_tokens=100" in rec.diagnosis


@pytest.mark.parametrize(
    ("body", "tokens"),
    [
        (  # llama.cpp b1 (as the real server and the simulator's llamacpp dialect send it)
            b'{"error": {"code": 400, "message": "request (1079 tokens) exceeds the available '
            b'context size (1024 tokens), try increasing it", '
            b'"type": "exceed_context_size_error", "n_prompt_tokens": 1079, "n_ctx": 1024}}',
            1079,
        ),
        (
            b'{"error": {"message": "This model\'s maximum context length is 4096 tokens. '
            b"However, your request has 5000 input tokens. Please reduce the length of the "
            b'input messages.", "type": "BadRequestError", "code": 400}}',
            5000,
        ),
    ],
)
async def test_context_exceeded_keeps_the_servers_prompt_count(body: bytes, tokens: int) -> None:
    rec, _ = await one(scripted([body], status=400, content_type="application/json"))
    assert rec.error_class == "context_exceeded"
    assert rec.prompt_tokens == tokens and rec.prompt_source == "error"


# --- outcome truth -------------------------------------------------------------------------


async def test_reasoning_then_stop_without_content_is_reasoning_only() -> None:
    parts = [chunk(reasoning="let me think"), chunk(None, finish="stop"), DONE]
    rec, text = await one(scripted(parts))
    assert rec.outcome == "reasoning_only" and text == ""
    assert rec.diagnosis is not None and "no answer" in rec.diagnosis


async def test_whitespace_only_content_after_reasoning_is_not_an_answer() -> None:
    parts = [chunk(reasoning="let me think"), chunk("\n\n", finish="stop"), DONE]
    rec, _ = await one(scripted(parts))
    assert rec.outcome == "reasoning_only"
    assert rec.diagnosis is not None and "whitespace" in rec.diagnosis


@pytest.mark.parametrize("where", ["reading", "sending"])
async def test_a_failure_inside_stress_is_one_truthful_record(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug of ours, while a reply is read inside the connection's read callback or while
    the request is sent from its task: an error record blamed on stress, never a fake ok
    and never a hang; the next request on the same client is answered."""
    from stress.net import http1, reply

    def broken(*args: object) -> None:
        raise RuntimeError("a bug")

    if where == "reading":
        monkeypatch.setattr(reply.ReplyReader, "_events", broken)
    else:
        monkeypatch.setattr(http1.Connection, "send", broken)
    async with raw_server(RawServer()) as server:
        client = ChatClient(f"http://127.0.0.1:{server.port}", {}, POLICY, limit=4)
        rec = RequestRecord(user=0, conversation=1, round=1, turn=1)
        t0 = time.perf_counter()
        await client.chat(BODY, rec, t0)
        took = time.perf_counter() - t0
        monkeypatch.undo()
        after = RequestRecord(user=0, conversation=1, round=2, turn=2)
        await client.chat(BODY, after, time.perf_counter())
        await client.close()
    assert rec.outcome == "error" and rec.error_class == "client_error", rec.error
    assert rec.error is not None and "RuntimeError: a bug" in rec.error
    assert rec.e2e_s is not None and took < POLICY.first_token  # no wait for a deadline
    assert rec.http_status == (200 if where == "reading" else None)
    assert after.outcome == "ok"


def test_an_ok_without_evidence_is_refused() -> None:
    rec = RequestRecord(user=0, conversation=1, round=1, turn=1)  # starts as "ok"
    _check_ok(rec)
    assert rec.outcome == "error" and rec.error_class == "client_error"
    assert rec.error is not None and "HTTP status" in rec.error and "finish_reason" in rec.error


# --- SSE through the client ----------------------------------------------------------------


async def test_cr_only_stream_is_ok() -> None:
    parts = [chunk("a"), chunk("b", finish="stop"), usage_chunk(5, 2), DONE]
    rec, text = await one(scripted([p.replace(b"\n", b"\r") for p in parts]))
    assert rec.outcome == "ok" and text == "ab" and rec.completion_tokens == 2


async def test_a_line_past_the_limit_ends_the_request_as_malformed() -> None:
    async def script(request: web.Request, body: dict[str, Any], n: int) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(chunk("a") + b"data: ")
        block = b"x" * (1 << 20)
        with contextlib.suppress(ConnectionError):
            for _ in range((MAX_EVENT_BYTES >> 20) + 4):
                await resp.write(block)
        return resp

    rec, text = await one(FakeServer(script=script), TimeoutPolicy(5, 30, 30, 120))
    assert rec.outcome == "error" and rec.error_class == "malformed_stream"
    assert rec.error is not None and "16 MiB" in rec.error and text == "a"


async def test_every_request_carries_its_id_and_a_resend_is_named_apart() -> None:
    """X-Request-ID is the record's ``request_id``; a request re-sent after a dead pooled
    connection goes out as ``-a2`` and the record keeps the id of the send that answered."""
    async with raw_server(RawServer(drop_reused=True)) as server:
        url = f"http://127.0.0.1:{server.port}"
        client = ChatClient(url, {}, POLICY, limit=8)
        records = []
        try:
            for rnd in (1, 2, 3):
                rec = RequestRecord(user=4, conversation=1, round=rnd, turn=rnd)
                rec.request_id = f"n0nce-u4-r{rnd}"
                await client.chat(BODY, rec, time.perf_counter())
                records.append(rec)
        finally:
            await client.close()
    assert [r.outcome for r in records] == ["ok"] * 3
    resent = [r for r in records if r.reconnects]
    assert resent and server.dropped == len(resent)
    for r in resent:
        assert r.request_id == f"n0nce-u4-r{r.round}-a2"
        assert f"n0nce-u4-r{r.round}" in server.request_ids  # the dropped attempt
    answered = [i for i in server.request_ids if i is not None]
    assert len(answered) == 3 + len(resent)
    assert {r.request_id for r in records} <= set(answered)


async def test_no_request_id_no_header_and_the_reply_id_is_kept() -> None:
    parts = [
        b'data: {"id":"chatcmpl-xyz","choices":[{"delta":{"role":"assistant"}}]}\n\n',
        chunk("hi", finish="stop"),
        DONE,
    ]
    server = scripted(parts)
    rec, _ = await one(server)
    assert rec.outcome == "ok" and rec.request_id is None
    assert rec.response_id == "chatcmpl-xyz"
    assert "X-Request-ID" not in server.headers_seen[0]


async def test_token_times_are_the_receive_times_of_text_chunks() -> None:
    """One entry per chunk that carried text (reasoning or content), in order; the first
    is the first token, so it lies ``ttft_s`` after the send."""
    from array import array

    parts = [
        chunk(reasoning="hm"),
        chunk(""),  # no text: not a token's time
        chunk("a"),
        chunk("b"),
        chunk("c", finish="stop"),
        usage_chunk(5, 4),
        DONE,
    ]
    times: array[float] = array("d")
    async with serve(scripted(parts, delay=0.03)) as server:
        client = ChatClient(server.url, {}, POLICY, limit=8)
        rec = RequestRecord(user=0, conversation=1, round=1, turn=1)
        rec.request_id = "n-u0-r1"
        t0 = time.perf_counter()
        await client.chat(BODY, rec, t0, times)
    assert rec.outcome == "ok"
    assert server.headers_seen[0]["X-Request-ID"] == "n-u0-r1"
    assert len(times) == 4 == rec.chunks_content + rec.chunks_reasoning
    assert rec.ttft_s is not None
    assert times[0] - (t0 + rec.queue_s) == pytest.approx(rec.ttft_s, abs=1e-9)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(g >= 0.02 for g in gaps), gaps  # each chunk 30 ms after the one before
    assert gaps[0] >= 0.05  # across the chunk without text (max_gap_s counts every chunk)
