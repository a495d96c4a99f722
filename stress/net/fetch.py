"""Small HTTP requests, read whole: the model list, the probe, the tokenizer calibration,
the server's health and metrics scrapes.

They go through the same HTTP/1.1 pool as the chat requests (``stress.net.http1``), so a run
loads one HTTP client, not two: aiohttp's import (~0.1 s on a 2-core machine, ~0.3 s
under gVisor, and ~10 MiB) stayed on the way to the first request only for these few
requests (issue 15).

What a request does, each tested in ``tests/net/test_fetch.py``:

- it never follows a redirect (it would carry the key elsewhere): the 3xx is the answer;
- a connection the server closed before a byte of the reply is retried once on a fresh
  one (a pooled connection the server dropped while idle); after a byte, it is an error;
- ``timeout_s`` bounds the whole request, connecting included; a connection whose reply
  was not read to its end is closed, never reused;
- a body past ``max_body`` bytes is an error, not memory.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import orjson

from stress.net.http1 import ConnectError, Endpoint, FailKind, Head, Pool, request_head

MAX_BODY = 256 << 20
"""The largest body read (a /metrics page of a big server is a few MiB)."""

FetchErrorKind = Literal["timeout", "connect", "disconnected", "protocol", "too_large", "url"]


class FetchError(Exception):
    """A request that got no complete answer. ``kind`` says which way; ``reason`` is a few
    words without host or credential (``Connection refused``); ``str()`` is the whole
    line."""

    def __init__(self, kind: FetchErrorKind, reason: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.reason = reason

    @property
    def short(self) -> str:
        """What the probe, the model list and the scrapes say: ``cannot connect: Connection
        refused``, ``timeout``, ``server disconnected``, ``invalid URL``, ``too large``;
        never a host, a header or a credential."""
        if self.kind == "connect":
            return f"cannot connect: {self.reason}"
        if self.kind in ("timeout", "disconnected", "url"):
            return self.reason
        return self.kind.replace("_", " ")


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    content_type: str | None
    """The media type alone, lower case (``application/json``); None when not sent."""
    location: str | None

    def json(self) -> Any:
        """The body as JSON; raises ``ValueError`` when it is not."""
        return orjson.loads(self.body)


class _Collect:
    """A :class:`stress.net.http1.Sink` that keeps the whole reply."""

    __slots__ = ("done", "error", "head", "limit", "parts", "size")

    def __init__(self, limit: int) -> None:
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.head: Head | None = None
        self.parts: list[bytes] = []
        self.size = 0
        self.limit = limit
        self.error: tuple[FailKind | Literal["too_large"], str] | None = None

    def on_data(self, now: float) -> None:
        pass

    def on_head(self, head: Head) -> None:
        self.head = head

    def on_body(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.limit:
            if self.error is None:
                self.error = ("too_large", f"a body over {self.limit >> 20} MiB")
                self.parts.clear()
        else:
            self.parts.append(data)

    def on_end(self) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def on_error(self, kind: FailKind, message: str) -> None:
        if self.error is None:
            self.error = (kind, message)
        if not self.done.done():
            self.done.set_result(None)


class Fetcher:
    """Requests to any number of servers, a keep-alive pool per server (``reuse=False``:
    a fresh connection per request)."""

    def __init__(
        self,
        connect_s: float = 30.0,
        *,
        limit: int = 16,
        reuse: bool = True,
        max_body: int = MAX_BODY,
    ) -> None:
        self.connect_s = connect_s
        self.limit = limit
        self.reuse = reuse
        self.max_body = max_body
        self._pools: dict[Endpoint, Pool] = {}

    async def __aenter__(self) -> Fetcher:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def get(self, url: str, headers: dict[str, str], timeout_s: float) -> Response:
        return await self.request("GET", url, headers, timeout_s)

    async def request(
        self,
        method: Literal["GET", "POST"],
        url: str,
        headers: dict[str, str],
        timeout_s: float,
        json_body: Any = None,
    ) -> Response:
        """The whole answer, whatever its status; raises :class:`FetchError` when there is
        none (the message names the host and why, never a header)."""
        try:
            ep = Endpoint.parse(url)
        except ValueError as e:
            raise FetchError("url", "invalid URL", f"invalid URL: {e}") from None
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        ep = dataclasses.replace(ep, path_prefix="")
        try:
            head = request_head(ep, path, headers, close=not self.reuse, method=method)
        except ValueError as e:
            raise FetchError("url", "bad header", str(e)) from None
        body = b"" if json_body is None else orjson.dumps(json_body)
        if method == "POST" or body:
            head += b"Content-Length: %d\r\n" % len(body)
        head += b"\r\n"
        pool = self._pools.get(ep)
        if pool is None:
            pool = self._pools[ep] = Pool(
                ep, limit=self.limit, connect_s=self.connect_s, reuse=self.reuse
            )
        where = f"{ep.host}:{ep.port}"
        try:
            async with asyncio.timeout(timeout_s):
                sink = await self._send(pool, head, body, fresh=False)
                if sink.error is not None and sink.error[0] == "dropped":
                    sink = await self._send(pool, head, body, fresh=True)
        except TimeoutError:
            raise FetchError(
                "timeout", "timeout", f"{where}: no answer within {timeout_s:g}s"
            ) from None
        except ConnectError as e:
            raise FetchError("connect", e.reason, str(e)) from None
        if sink.error is not None:
            kind, message = sink.error
            fetch_kind: FetchErrorKind = (
                "disconnected"
                if kind in ("dropped", "reset")
                else "too_large"
                if kind == "too_large"
                else "protocol"
            )
            reason = "server disconnected" if fetch_kind == "disconnected" else message
            raise FetchError(fetch_kind, reason, f"{where}: {message}")
        assert sink.head is not None
        h = sink.head
        ctype = h.content_type.split(";", 1)[0].strip().lower() if h.content_type else None
        return Response(h.status, b"".join(sink.parts), ctype or None, h.location)

    async def _send(self, pool: Pool, head: bytes, body: bytes, *, fresh: bool) -> _Collect:
        sink = _Collect(self.max_body)
        conn = await pool.acquire(fresh=fresh)
        try:
            conn.send(head, body, sink)
            await sink.done
        finally:
            pool.release(conn)  # kept only after a complete reply, else closed
        return sink

    async def close(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.close()
