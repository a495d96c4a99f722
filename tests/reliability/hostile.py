"""A hostile OpenAI-compatible server, written on raw asyncio streams.

aiohttp's own server cannot misbehave below HTTP: it will not send a bad status line, cut a
chunked body with a TCP reset, or close a keep-alive connection just as the next request
arrives. Real servers do all of these (llama-server closes idle connections, a killed
server resets its streams), and the reliability suite must prove that each one still ends
in exactly one truthful record. So this server writes the bytes itself.

``GET /v1/models`` is always answered properly (a run must get as far as sending chats);
every other GET is a 404. ``POST /v1/chat/completions`` is answered by the ``mode``. The
server counts what it received, so a test can check "every request the server received
ends in exactly one line of requests.jsonl" from the server's side, not stress's.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

Mode = Literal[
    "ok",  # a good stream (tokens x stream_delay_s)
    "close_idle",  # good streams; a request that arrives on a used connection is dropped
    "reset_mid_stream",  # two tokens, then a TCP RST
    "slow_headers",  # silence for pause_s before the status line
    "stall_mid_stream",  # one token, silence for pause_s, then the rest
    "garbage",  # random bytes instead of a response
    "bad_status_line",  # "HTTP/1.1 abc ..."
    "html_200",  # HTTP 200 text/html
    "giant_line",  # the first chat gets one 10 MB data line; the rest stream slowly
    "cr_only",  # valid SSE with CR line endings
    "redirect",  # 307 to another host, with credentials in the Location
    "overflow_usage",  # usage numbers out of any sane range
    "restart",  # the listener goes away (all connections dropped) and comes back
    "empty",  # HTTP 200, finish_reason stop, not a word of text
]
MODES: tuple[Mode, ...] = (
    "ok",
    "close_idle",
    "reset_mid_stream",
    "slow_headers",
    "stall_mid_stream",
    "garbage",
    "bad_status_line",
    "html_200",
    "giant_line",
    "cr_only",
    "redirect",
    "overflow_usage",
    "restart",
    "empty",
)

GIANT_BYTES = 10_000_000
OVERFLOW_USAGES: tuple[dict[str, Any], ...] = (
    {
        "prompt_tokens": 2**64 - 1,
        "completion_tokens": -5,
        "total_tokens": 2**64 - 1,
        "prompt_tokens_details": {"cached_tokens": 2**64 - 1},
    },
    {
        "prompt_tokens": 2**70,  # parsed as a float by most JSON readers
        "completion_tokens": "7",
        "total_tokens": -1,
        "prompt_tokens_details": {"cached_tokens": -3},
    },
    {
        "prompt_tokens": 10,
        "completion_tokens": 2.5,
        "total_tokens": 12.5,
        "prompt_tokens_details": {"cached_tokens": 1000},  # 10,000 % cached
    },
)


@dataclass(slots=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


def sse_event(obj: dict[str, Any], eol: bytes = b"\n") -> bytes:
    return b"data: " + orjson.dumps(obj) + eol + eol


def token_event(text: str, finish: str | None = None, eol: bytes = b"\n") -> bytes:
    delta = {"content": text} if text else {}
    obj = {
        "id": "chatcmpl-hostile",
        "object": "chat.completion.chunk",
        "model": "hostile-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return sse_event(obj, eol)


def usage_event(usage: dict[str, Any], eol: bytes = b"\n") -> bytes:
    obj = {"object": "chat.completion.chunk", "choices": [], "usage": usage}
    return sse_event(obj, eol)


def _big_int_json(usage: dict[str, Any]) -> bytes:
    """orjson refuses integers past 64 bits; the stdlib writes them like a careless server."""
    import json

    return json.dumps(usage).encode()


def chunked(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)
CHUNKED_END = b"0\r\n\r\n"


def _words(n: int) -> list[str]:
    return [f" word{i}" for i in range(n)]


@dataclass
class HostileServer:
    mode: Mode = "ok"
    host: str = "127.0.0.1"
    tokens: int = 4
    """Token chunks in a good stream (the last carries finish_reason stop)."""
    stream_delay_s: float = 0.0
    """Pause before each token chunk of a good stream."""
    pause_s: float = 3.0
    """slow_headers / stall_mid_stream: the silence, longer than the scenario's timeout."""
    down_s: float = 1.0
    """restart: how long the port refuses connections."""
    restart_on: int = 2
    """restart: the chat request (1-based) whose arrival kills the server."""
    redirect_to: str = ""
    """redirect: the Location (credentials and all)."""
    api_key: str | None = None
    """When set, every request must carry ``Authorization: Bearer <api_key>`` (else 401),
    and the server echoes the key back in error messages and replies, as careless servers
    do."""
    models: list[str] = field(default_factory=lambda: ["hostile-model"])

    # what happened, from the server's side
    received: int = 0
    """Chat requests read in full and taken on (answered, or cut off by the mode)."""
    dropped: int = 0
    """close_idle: chat requests read on a used keep-alive connection, then the connection
    closed without a byte of answer (the client must re-send them once)."""
    lost_to_restart: int = 0
    """restart: chat requests read but never answered because the server went away."""
    restarts: int = 0
    active: int = 0
    """Chat requests being answered right now."""
    streams_started: int = 0
    """Good streams whose first token has been written."""
    auth_failures: int = 0
    port: int = 0

    _server: asyncio.Server | None = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _rng: random.Random = field(default_factory=lambda: random.Random(12))

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._connection, self.host, self.port, reuse_address=True, limit=1 << 20
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self._drop_all()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), timeout=5)

    # --- connections -----------------------------------------------------------------

    def _drop_all(self) -> None:
        for w in list(self._writers):
            _abort(w)
        self._writers.clear()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        self._writers.add(writer)
        used = False
        try:
            while True:
                req = await _read_request(reader)
                if req is None:
                    break
                if self.api_key is not None and not self._authorized(req):
                    self.auth_failures += 1
                    await self._json(writer, 401, {"error": {"message": "bad or missing key"}})
                    continue
                if req.method == "POST" and req.path.startswith("/v1/chat/completions"):
                    if self.mode == "close_idle" and used:
                        # the idle connection was closed as this request went out
                        self.dropped += 1
                        break
                    used = True
                    self.received += 1
                    self.active += 1
                    try:
                        keep = await self._chat(req, writer, self.received)
                    finally:
                        self.active -= 1
                    if not keep:
                        break
                elif req.method == "GET" and req.path.startswith("/v1/models"):
                    used = True
                    await self._json(writer, 200, self._models())
                else:
                    used = True
                    await self._json(writer, 404, {"error": {"message": "not found"}})
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()
            if task is not None:
                self._tasks.discard(task)

    def _models(self) -> dict[str, Any]:
        data = [{"id": m, "object": "model", "owned_by": "hostile"} for m in self.models]
        return {"object": "list", "data": data}

    def _authorized(self, req: Request) -> bool:
        return req.headers.get("authorization") == f"Bearer {self.api_key}"

    async def _json(self, writer: asyncio.StreamWriter, status: int, obj: Any) -> None:
        body = orjson.dumps(obj)
        writer.write(
            f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()

    # --- chat modes ------------------------------------------------------------------

    async def _chat(self, req: Request, w: asyncio.StreamWriter, n: int) -> bool:
        """Answer chat request number ``n``; False when the connection must close."""
        mode = self.mode
        if self.api_key is not None and n % 2:
            # a careless server that echoes the key in its error message
            await self._json(w, 500, {"error": {"message": f"bad key {self.api_key!s}"}})
            return True
        if mode in ("ok", "close_idle"):
            await self._good(w, echo=self.api_key)
        elif mode == "reset_mid_stream":
            w.write(SSE_HEAD + chunked(token_event(" one")) + chunked(token_event(" two")))
            await w.drain()
            _abort(w)
            return False
        elif mode == "slow_headers":
            await asyncio.sleep(self.pause_s)
            await self._good(w)
        elif mode == "stall_mid_stream":
            w.write(SSE_HEAD + chunked(token_event(" first")))
            await w.drain()
            await asyncio.sleep(self.pause_s)
            await self._good(w, head=False)
        elif mode == "garbage":
            noise = bytes(self._rng.choice(range(14, 256)) for _ in range(4096))
            w.write(noise + b"\r\n\r\n")
            await w.drain()
            return False
        elif mode == "bad_status_line":
            body = token_event(" hi", "stop") + b"data: [DONE]\n\n"
            w.write(
                b"HTTP/1.1 abc Not A Status\r\nContent-Type: text/event-stream\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await w.drain()
            return False
        elif mode == "html_200":
            page = b"<!doctype html><html><body><h1>Welcome to nginx!</h1></body></html>\n"
            w.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n"
                + f"Content-Length: {len(page)}\r\n\r\n".encode()
                + page
            )
            await w.drain()
        elif mode == "giant_line":
            if n == 1:
                await self._giant(w)
            else:
                await self._good(w)
        elif mode == "cr_only":
            await self._good(w, eol=b"\r")
        elif mode == "redirect":
            w.write(
                b"HTTP/1.1 307 Temporary Redirect\r\n"
                + f"Location: {self.redirect_to}\r\nContent-Length: 0\r\n\r\n".encode()
            )
            await w.drain()
        elif mode == "overflow_usage":
            usage = OVERFLOW_USAGES[(n - 1) % len(OVERFLOW_USAGES)]
            await self._good(w, usage=usage)
        elif mode == "empty":
            w.write(SSE_HEAD + chunked(token_event("", "stop")))
            usage = {"prompt_tokens": 50, "completion_tokens": 0, "total_tokens": 50}
            w.write(chunked(usage_event(usage)) + chunked(b"data: [DONE]\n\n") + CHUNKED_END)
            await w.drain()
        elif mode == "restart":
            if n == self.restart_on:
                self.lost_to_restart += 1
                task = asyncio.create_task(self._restart())
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                return False
            await self._good(w)
        return True

    async def _good(
        self,
        w: asyncio.StreamWriter,
        *,
        head: bool = True,
        eol: bytes = b"\n",
        usage: dict[str, Any] | None = None,
        echo: str | None = None,
    ) -> None:
        if head:
            w.write(SSE_HEAD)
        words = _words(self.tokens)
        if echo is not None:
            words[0] = f" you sent {echo}"
        for i, word in enumerate(words):
            if self.stream_delay_s:
                await asyncio.sleep(self.stream_delay_s)
            finish = "stop" if i == len(words) - 1 else None
            w.write(chunked(token_event(word, finish, eol)))
            await w.drain()
            if i == 0:
                self.streams_started += 1
        if usage is None:
            usage = {"prompt_tokens": 50, "completion_tokens": self.tokens, "total_tokens": 54}
            w.write(chunked(usage_event(usage, eol)))
        else:
            obj = b'{"object":"chat.completion.chunk","choices":[],"usage":'
            w.write(chunked(b"data: " + obj + _big_int_json(usage) + b"}" + eol + eol))
        w.write(chunked(b"data: [DONE]" + eol + eol) + CHUNKED_END)
        await w.drain()

    async def _giant(self, w: asyncio.StreamWriter) -> None:
        w.write(SSE_HEAD + chunked(token_event(" start")))
        line = token_event("x" * GIANT_BYTES)
        step = 1 << 16
        for i in range(0, len(line), step):
            w.write(chunked(line[i : i + step]))
            await w.drain()
        w.write(chunked(token_event(" end", "stop")) + chunked(b"data: [DONE]\n\n"))
        w.write(CHUNKED_END)
        await w.drain()

    async def _restart(self) -> None:
        """Like ``kill -9`` and a restart: every connection dropped, the port refused for
        ``down_s``, then the same port served again."""
        assert self._server is not None
        self._server.close()
        self._drop_all()
        await asyncio.sleep(self.down_s)
        self._server = await asyncio.start_server(
            self._connection, self.host, self.port, reuse_address=True, limit=1 << 20
        )
        self.restarts += 1


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST (SO_LINGER 0), as a killed process's kernel does."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(Exception):
        writer.transport.abort()


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    """One HTTP/1.1 request (Content-Length bodies only, as aiohttp sends them)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) < 2:
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip(" ")
    n = int(headers.get("content-length") or 0)
    body = await reader.readexactly(n) if n else b""
    return Request(parts[0], parts[1], headers, body)


@contextlib.asynccontextmanager
async def hostile(mode: Mode = "ok", **kwargs: Any) -> AsyncIterator[HostileServer]:
    server = HostileServer(mode, **kwargs)
    await server.start()
    try:
        yield server
    finally:
        await server.close()
