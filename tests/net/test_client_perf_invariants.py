"""Performance invariants of the client that can be checked without timing anything.

Timing targets live in ``benchmarks/`` (they need pinned cores and print figures); here
only what a busy, shared test machine cannot disturb: the client keeps nothing per chunk
or per request once a request has ended.
"""

from __future__ import annotations

import contextlib
import gc
import time
import tracemalloc
from typing import Any

import orjson
import pytest
from aiohttp import web

from stress.core.record import RequestRecord
from stress.net.client import ChatClient
from stress.net.deadlines import TimeoutPolicy
from stress.net.sse import MAX_EVENT_BYTES
from tests.fakes import DONE, FakeServer, chunk, serve, usage_chunk

pytestmark = pytest.mark.timeout(60)

CHUNKS = 200
BODY = orjson.dumps({"model": "m", "messages": [], "stream": True})
REPLY = b"".join(
    [chunk(" tok") for _ in range(CHUNKS - 1)]
    + [chunk(".", finish="stop"), usage_chunk(10, CHUNKS), DONE]
)


class _Discard(list[Any]):
    def append(self, item: Any) -> None:
        pass


async def _script(request: web.Request, body: dict[str, Any], n: int) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for i in range(0, len(REPLY), 997):  # odd-sized writes: events split across reads
        await resp.write(REPLY[i : i + 997])
    await resp.write_eof()
    return resp


async def test_no_memory_kept_per_chunk_or_per_request() -> None:
    server = FakeServer(script=_script)
    server.requests = _Discard()  # the fake keeps every request; not the client's memory
    server.headers_seen = _Discard()
    async with serve(server):
        client = ChatClient(server.url, {}, TimeoutPolicy(5, 5, 5, 30), limit=4)

        async def batch(n: int) -> None:
            for _ in range(n):
                rec = RequestRecord(user=0, conversation=1, round=1, turn=1)
                reply = await client.chat(BODY, rec, time.perf_counter())
                assert rec.outcome == "ok" and rec.chunks_content == CHUNKS
                assert len(reply.content) == 4 * (CHUNKS - 1) + 1

        await batch(20)  # pools, caches, first-use allocations
        gc.collect()
        tracemalloc.start()
        try:
            await batch(20)
            gc.collect()
            before = tracemalloc.get_traced_memory()[0]
            await batch(100)  # 20,000 more chunks
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        # a leak of one small object per chunk would be >= 1 MB here
        assert after - before < 100_000, f"grew {after - before} B over 100 requests"


async def test_a_giant_line_is_refused_in_bounded_memory() -> None:
    """A server streaming one 64 MiB line: the client stops at the line limit, so what it
    holds stays near ``MAX_EVENT_BYTES`` (pieces, then one join), not the whole line."""
    block = b"x" * (1 << 20)
    sent = 4 * (MAX_EVENT_BYTES >> 20)

    async def giant(request: web.Request, body: dict[str, Any], n: int) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b"data: ")
        with contextlib.suppress(ConnectionError):
            for _ in range(sent):
                await resp.write(block)
        return resp

    server = FakeServer(script=giant)
    async with serve(server):
        client = ChatClient(server.url, {}, TimeoutPolicy(5, 60, 60, 300), limit=4)
        rec = RequestRecord(user=0, conversation=1, round=1, turn=1)
        gc.collect()
        tracemalloc.start()
        try:
            await client.chat(BODY, rec, time.perf_counter())
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert rec.error_class == "malformed_stream"
    assert peak < 2 * MAX_EVENT_BYTES, f"peak {peak >> 20} MiB for a {sent} MiB line"
