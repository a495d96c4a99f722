"""A scripted OpenAI-compatible server on 127.0.0.1 for client and engine tests.

Each chat request is answered by a ``Script``: a coroutine that gets the request and the
running count and writes whatever the test needs on the wire (good streams, errors,
stalls, resets). Unlike the simulator, it does exactly and only what a test says.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

Script = Callable[[web.Request, dict[str, Any], int], Awaitable[web.StreamResponse]]


def chunk(
    content: str | None = None,
    *,
    reasoning: str | None = None,
    field_name: str = "reasoning",
    finish: str | None = None,
) -> bytes:
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta[field_name] = reasoning
    obj = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def usage_chunk(
    prompt: int, completion: int, cached: int | None = None, timings: dict[str, Any] | None = None
) -> bytes:
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    obj: dict[str, Any] = {"object": "chat.completion.chunk", "choices": [], "usage": usage}
    if timings:
        obj["timings"] = timings
    return b"data: " + orjson.dumps(obj) + b"\n\n"


DONE = b"data: [DONE]\n\n"


async def stream(
    request: web.Request,
    parts: list[bytes],
    delay: float = 0.0,
    status: int = 200,
    content_type: str = "text/event-stream",
) -> web.StreamResponse:
    resp = web.StreamResponse(status=status, headers={"Content-Type": content_type})
    await resp.prepare(request)
    for p in parts:
        if delay:
            await asyncio.sleep(delay)
        await resp.write(p)
    await resp.write_eof()
    return resp


async def ok_script(request: web.Request, body: dict[str, Any], n: int) -> web.StreamResponse:
    words = ["Hello", " there", ",", " friend", "."]
    parts = [chunk(w) for w in words[:-1]] + [chunk(words[-1], finish="stop")]
    return await stream(request, [*parts, usage_chunk(100, 5, cached=0), DONE], delay=0.002)


@dataclass
class FakeServer:
    script: Script = ok_script
    models: list[str] = field(default_factory=lambda: ["fake-model"])
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers_seen: list[dict[str, str]] = field(default_factory=list)
    url: str = ""
    tokenize_ratio: float | None = None
    """When set, POST /tokenize answers like vLLM with this many tokens per word."""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        if self.tokenize_ratio is not None:
            app.router.add_post("/tokenize", self._tokenize)
        return app

    async def _tokenize(self, request: web.Request) -> web.Response:
        from stress.core.tokens import count_tokens

        body = orjson.loads(await request.read())
        assert self.tokenize_ratio is not None
        count = round(count_tokens(body["prompt"]) * self.tokenize_ratio)
        return web.json_response({"count": count, "max_model_len": 32768, "tokens": []})

    async def _models(self, request: web.Request) -> web.Response:
        data = [{"id": m, "object": "model", "owned_by": "fake"} for m in self.models]
        return web.json_response({"object": "list", "data": data})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        self.requests.append(body)
        self.headers_seen.append(dict(request.headers))
        return await self.script(request, body, len(self.requests))


@contextlib.asynccontextmanager
async def serve(server: FakeServer) -> AsyncIterator[FakeServer]:
    runner = web.AppRunner(server.app(), handle_signals=False, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    sockets = site._server.sockets  # type: ignore[union-attr]
    server.url = f"http://127.0.0.1:{sockets[0].getsockname()[1]}"
    try:
        yield server
    finally:
        await runner.cleanup()


async def read_request(reader: asyncio.StreamReader, first: bytes = b"") -> bytes:
    """One HTTP/1.1 request off a raw connection (its ``Content-Length`` body read and
    dropped); returns the head. ``first``: bytes of it already read."""
    head = first + await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    await reader.readexactly(length)
    return head


# --- raw HTTP/1.1 servers: every byte on the wire as the test says ------------------

Reply = Callable[[int, asyncio.StreamWriter], Awaitable[bool]]
"""Writes the reply to request n; False closes the connection afterwards."""


def framed(body: bytes, *, ctype: bytes = b"text/event-stream", extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n%s" % (
        ctype,
        len(body),
        extra,
        body,
    )


@dataclass
class Raw:
    """A server that reads HTTP/1.1 requests and answers each with ``reply``."""

    reply: Reply
    port: int = 0
    connections: int = 0
    open_now: int = 0
    most_open: int = 0
    heads: list[bytes] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        try:
            while True:
                self.heads.append(await read_request(reader))
                keep = await self.reply(len(self.heads), writer)
                await writer.drain()
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open_now -= 1
            writer.close()


@contextlib.asynccontextmanager
async def raw(reply: Reply, tls: ssl.SSLContext | None = None) -> AsyncIterator[Raw]:
    server = Raw(reply)
    srv = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=tls)
    server.port = srv.sockets[0].getsockname()[1]
    async with srv:
        yield server


def writes(data: bytes, keep: bool = True) -> Reply:
    async def reply(n: int, w: asyncio.StreamWriter) -> bool:
        w.write(data)
        return keep

    return reply
