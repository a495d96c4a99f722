"""HTTP/1.1 connections for the chat requests: a keep-alive pool of asyncio protocols whose
responses are parsed by llhttp (``httptools``) inside ``data_received``, as the bytes arrive.

Why not aiohttp on this path (it stays for probes and metrics scrapes): there every network
read is copied into a ``StreamReader`` and wakes the request's task, which then reads it
back; on a paced stream, one token per read, that wake-up is most of the client's cost per
token. Here the bytes go straight from the event loop's read callback through the HTTP
parser to the request's :class:`Sink` (the SSE parser and the record), and the request's
task wakes once, when the reply has ended. The receive instant is taken in the read
callback itself.

What the pool guarantees (each a test in ``tests/net/test_http1.py`` or ``test_client.py``):

- a connection goes back to the pool only after a complete reply that allows keep-alive,
  and only when ``reuse`` is on; anything else (an error body cut short, a stall, a
  cancellation, a reply the caller stopped reading) closes it;
- a connection the server closed while idle is dropped from the pool when it closes;
  one idle longer than ``keepalive_s`` is never reused (servers close them about then);
- a request whose connection closed before a single byte of the reply came back ends in
  :meth:`Sink.on_error` with ``"dropped"`` (the caller may re-send it once); after a byte,
  ``"reset"``; an unparsable reply, an oversized head or a protocol switch, ``"protocol"``;
- interim ``1xx`` replies are skipped (RFC 9110 15.2); a reply framed by the connection's
  end (no length, not chunked) ends when the server closes;
- never more than ``limit`` connections are open at once; a caller over it waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import ssl
import time
from collections import deque
from dataclasses import dataclass
from typing import Literal, Protocol
from urllib.parse import urlsplit

import httptools

from stress import __version__

MAX_HEAD_BYTES = 64 << 10
"""The longest response head accepted (status line and headers); past it the reply is a
``protocol`` error rather than memory taken by a hostile server."""
MAX_HEADERS = 128
DNS_TTL_S = 10.0
"""How long a resolved address is reused for new connections (aiohttp's default too)."""

FailKind = Literal["dropped", "reset", "protocol", "client_error"]


class ConnectError(Exception):
    """A connection could not be opened (refused, unresolvable, TLS, timeout); the message
    names the host and port and why, never a credential; ``reason`` is the why alone
    (``Connection refused``, ``timeout``)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Head:
    """What the reply's head says that a chat client needs."""

    status: int
    reason: str
    content_type: str | None
    location: str | None
    retry_after: str | None


class Sink(Protocol):
    """The reader of one reply; the connection calls these from the event loop's read
    callback, in this order: ``on_data`` for every read, ``on_head`` once, ``on_body`` for
    each piece of the body, then ``on_end`` or ``on_error`` (at most once)."""

    def on_data(self, now: float) -> None: ...

    def on_head(self, head: Head) -> None: ...

    def on_body(self, data: bytes) -> None: ...

    def on_end(self) -> None: ...

    def on_error(self, kind: FailKind, message: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where requests go: the URL's parts, and the ``Host`` header they imply."""

    scheme: str
    host: str
    port: int
    path_prefix: str
    host_header: str

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {scheme}://{parts.hostname or ''}")
        default = 443 if scheme == "https" else 80
        port = parts.port or default
        host = parts.hostname
        shown = f"[{host}]" if ":" in host else host
        host_header = shown if port == default else f"{shown}:{port}"
        return cls(scheme, host, port, parts.path.rstrip("/"), host_header)


def request_head(
    endpoint: Endpoint, path: str, headers: dict[str, str], *, close: bool, method: str = "POST"
) -> bytes:
    """The constant part of a request's head (everything but ``Content-Length`` and the
    request id), built once per client. ``headers`` override the defaults by name, in
    any case. A line break in a name or value is refused (it would inject a header); the
    error names the header, never its value (it may be a key)."""
    merged: dict[str, tuple[str, str]] = {}
    defaults = {
        "Host": endpoint.host_header,
        "User-Agent": f"stress/{__version__}",
        "Accept": "*/*",
        "Accept-Encoding": "identity",
    }
    if method == "POST":
        defaults["Content-Type"] = "application/json"
    for name, value in (*defaults.items(), *headers.items()):
        if any(c in name for c in "\r\n\0:") or any(c in value for c in "\r\n\0"):
            raise ValueError(f"header {name[:60]!r} holds a line break, NUL or colon")
        merged[name.lower()] = (name, value)
    if close:
        merged["connection"] = ("Connection", "close")
    lines = [f"{method} {endpoint.path_prefix}{path} HTTP/1.1\r\n".encode("ascii")]
    lines += [f"{name}: {value}\r\n".encode() for name, value in merged.values()]
    return b"".join(lines)


class Connection(asyncio.Protocol):
    """One TCP (or TLS) connection, one reply at a time, parsed as it arrives."""

    __slots__ = (
        "_content_type",
        "_framed",
        "_head_bytes",
        "_in_head",
        "_location",
        "_n_headers",
        "_reason",
        "_retry_after",
        "closed",
        "got_bytes",
        "idle_since",
        "parser",
        "pool",
        "reusable",
        "sink",
        "transport",
        "waited_s",
    )

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.sink: Sink | None = None
        self.closed = False
        self.reusable = False
        """The last reply ended completely on a connection that may carry another."""
        self.got_bytes = False
        self.idle_since = 0.0
        self.waited_s = 0.0
        """How long the request that took this connection waited for the pool (0 when it
        was free): the client counts that as its queueing, not as time to first token."""
        self._reset_head()

    def _reset_head(self) -> None:
        self._in_head = True
        self._head_bytes = 0
        self._n_headers = 0
        self._reason = b""
        self._content_type: bytes | None = None
        self._location: bytes | None = None
        self._retry_after: bytes | None = None
        self._framed = False

    # --- used by the client ----------------------------------------------------------

    def send(self, head: bytes, body: bytes, sink: Sink) -> None:
        """Write one request (its head, then its body: one system call, no joined copy);
        its reply goes to ``sink``."""
        assert self.transport is not None and self.sink is None
        self.sink = sink
        self.reusable = False
        self.got_bytes = False
        self._reset_head()
        try:
            self.transport.writelines((head, body))
        except (OSError, RuntimeError) as e:  # closed under our feet
            self._fail("dropped", f"the connection closed before the request went out ({_text(e)})")

    def close(self) -> None:
        """Close at once (a reply not read to its end cannot leave the connection usable)."""
        self.sink = None
        if not self.closed:
            self.closed = True
            self.reusable = False
            if self.transport is not None:
                self.transport.abort()
            self.pool._forget(self)

    # --- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        sink = self.sink
        if sink is None:  # bytes nobody asked for: an idle connection must not carry them
            self.close()
            return
        self.got_bytes = True
        sink.on_data(time.perf_counter())
        in_head = self._in_head
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail("protocol", "the server switched protocols instead of replying")
        except httptools.HttpParserCallbackError as e:
            cause = e.__context__
            if isinstance(cause, _TooManyHeaders):
                self._fail("protocol", f"a reply with more than {MAX_HEADERS} headers")
            else:  # a bug of ours in a callback: still the request's record, never a crash
                self._fail("client_error", f"stress failed reading the reply: {_text(cause)}")
        except httptools.HttpParserError as e:
            what = " ".join(str(e).split())[:200] or type(e).__name__
            self._fail("protocol", f"unreadable HTTP response: {what}")
        else:
            if in_head and self._in_head:  # checked after the parse: a read is <= 256 KiB
                self._head_bytes += len(data)
                if self._head_bytes > MAX_HEAD_BYTES:
                    self._fail("protocol", f"a reply head longer than {MAX_HEAD_BYTES >> 10} KiB")

    def connection_lost(self, exc: Exception | None) -> None:
        was_closed = self.closed
        self.closed = True
        self.reusable = False
        sink = self.sink
        self.sink = None
        if not was_closed:
            self.pool._forget(self)
        if sink is None:
            return
        if not self._in_head and not self._framed:  # the reply was framed by the close
            try:
                sink.on_end()
            except Exception as e:  # a bug of ours: still the request's record
                sink.on_error("client_error", f"stress failed reading the reply: {_text(e)}")
        elif not self.got_bytes:
            why = f" ({_text(exc)})" if exc is not None else ""
            sink.on_error("dropped", f"the server closed the connection before replying{why}")
        else:
            why = f" ({_text(exc)})" if exc is not None else ""
            sink.on_error("reset", f"the connection closed before the reply ended{why}")

    # --- httptools callbacks -----------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.sink is None:  # a reply nobody asked for: never reuse this connection
            self.reusable = False

    def on_status(self, reason: bytes) -> None:
        if len(self._reason) < 200:  # called once per read the reason phrase spans
            self._reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self._n_headers += 1
        if self._n_headers > MAX_HEADERS:
            raise _TooManyHeaders
        n = name.lower()
        if n == b"content-type":
            if self._content_type is None:
                self._content_type = value
        elif n == b"content-length" or n == b"transfer-encoding":
            self._framed = True
        elif n == b"location":
            self._location = value
        elif n == b"retry-after":
            self._retry_after = value

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200 and status != 101:  # interim (100 Continue, 103 Early Hints)
            self._n_headers = 0
            return
        self._in_head = False
        sink = self.sink
        if sink is not None:
            sink.on_head(
                Head(
                    status,
                    self._reason[:200].decode("latin-1"),
                    _str(self._content_type),
                    _str(self._location),
                    _str(self._retry_after),
                )
            )

    def on_body(self, body: bytes) -> None:
        sink = self.sink
        if sink is not None:
            sink.on_body(body)

    def on_message_complete(self) -> None:
        if self._in_head:  # the end of an interim reply: the real one follows
            self._reset_head()
            return
        sink = self.sink
        self.reusable = self.pool.reuse and self.parser.should_keep_alive()
        if sink is not None:
            sink.on_end()  # attached until it returns: a failure in it still reaches it
        self.sink = None

    def _fail(self, kind: FailKind, message: str) -> None:
        sink = self.sink
        self.close()
        if sink is not None:
            sink.on_error(kind, message)


class _TooManyHeaders(Exception):
    pass


class Pool:
    """Connections to one endpoint: idle ones reused newest first, at most ``limit`` open."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        limit: int,
        connect_s: float,
        reuse: bool = True,
        keepalive_s: float = 30.0,
    ) -> None:
        self.endpoint = endpoint
        self.limit = max(1, limit)
        self.connect_s = connect_s
        self.reuse = reuse
        self.keepalive_s = keepalive_s
        self._idle: list[Connection] = []
        self._open = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._woken = 0
        """Waiters woken whose task has not run yet: each is owed what freed it."""
        self._ssl: ssl.SSLContext | None = None
        self._addrs: list[str] = []
        self._addrs_at = -DNS_TTL_S
        self._closing = False
        try:
            ipaddress.ip_address(endpoint.host)
            self._addrs, self._addrs_at = [endpoint.host], float("inf")
        except ValueError:
            pass

    @property
    def open_connections(self) -> int:
        return self._open

    @property
    def idle_connections(self) -> int:
        return len(self._idle)

    async def acquire(self, *, fresh: bool = False) -> Connection:
        """A connection ready for a request: the newest idle one that is still open and not
        idle too long, else a new one (``fresh``: always a new one). Requests that find the
        pool full wait their turn in arrival order: a newcomer never takes a connection that
        a woken waiter is owed. The wait is ``waited_s`` on the connection returned. Raises
        :class:`ConnectError`."""
        t_wait = 0.0
        if self._waiters or self._woken:  # others wait: take a place behind them
            t_wait = time.perf_counter()
            await self._wait(front=False)
        while True:
            if not fresh:
                conn = self._take_idle()
                if conn is not None:
                    return self._taken(conn, t_wait)
            elif self._open >= self.limit and self._idle:
                self._idle[0].close()  # make room for the fresh one
            if self._open < self.limit:
                break
            t_wait = t_wait or time.perf_counter()
            await self._wait(front=True)  # woken but beaten to it: first in line again
        self._open += 1
        try:
            return self._taken(await self._connect(), t_wait)
        except BaseException:
            self._open -= 1
            self._wake()
            raise

    def release(self, conn: Connection) -> None:
        """The request is done with ``conn``: keep it if its reply ended cleanly, else close."""
        if conn.reusable and not conn.closed and conn.sink is None and not self._closing:
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
            self._wake()
        else:
            conn.close()

    async def close(self) -> None:
        self._closing = True
        for conn in list(self._idle):
            conn.close()
        self._idle.clear()
        await asyncio.sleep(0)  # let the transports' connection_lost run

    # --- internals -------------------------------------------------------------------

    def _forget(self, conn: Connection) -> None:
        """``conn`` closed: it no longer counts against the limit."""
        self._open -= 1
        if conn in self._idle:
            self._idle.remove(conn)
        self._wake()

    def _take_idle(self) -> Connection | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and now - conn.idle_since < self.keepalive_s:
                return conn
            conn.close()
        return None

    def _taken(self, conn: Connection, t_wait: float) -> Connection:
        conn.waited_s = time.perf_counter() - t_wait if t_wait else 0.0
        if self._waiters and (self._idle or self._open < self.limit):
            self._wake()  # more was freed than there were woken waiters: the next one's turn
        return conn

    async def _wait(self, *, front: bool) -> None:
        """Until a connection is freed for this waiter (``front``: ahead of the others)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if front:
            self._waiters.appendleft(fut)
        else:
            self._waiters.append(fut)
        try:
            await fut
        except BaseException:
            if fut.done() and not fut.cancelled():
                self._woken -= 1
                self._wake()  # woken, then cancelled: pass the turn on
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(fut)
            raise
        self._woken -= 1

    def _wake(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                self._woken += 1
                return

    async def _connect(self) -> Connection:
        conn = Connection(self)
        try:
            await self._open_transport(conn)
        except BaseException:
            if conn.transport is not None:  # connected just as the time ran out
                conn.closed = True
                conn.transport.abort()
            raise
        return conn

    async def _open_transport(self, conn: Connection) -> None:
        ep = self.endpoint
        loop = asyncio.get_running_loop()
        where = f"{ep.host}:{ep.port}"
        tls = self._tls()
        last: BaseException | None = None
        try:
            async with asyncio.timeout(self.connect_s):
                for addr in await self._resolve(loop):
                    try:
                        await loop.create_connection(
                            lambda: conn,
                            addr,
                            ep.port,
                            ssl=tls,
                            server_hostname=ep.host if tls is not None else None,
                        )
                        return
                    except OSError as e:  # refused, unreachable, TLS: the next address
                        last = e
        except TimeoutError:
            raise ConnectError(
                f"cannot connect to {where}: no connection within {self.connect_s:g}s", "timeout"
            ) from None
        except OSError as e:  # the name did not resolve
            raise ConnectError(f"cannot connect to {where}: {_text(e)}", _reason(e)) from None
        raise ConnectError(f"cannot connect to {where}: {_text(last)}", _reason(last))

    async def _resolve(self, loop: asyncio.AbstractEventLoop) -> list[str]:
        if time.monotonic() - self._addrs_at < DNS_TTL_S:
            return self._addrs
        infos = await loop.getaddrinfo(
            self.endpoint.host, self.endpoint.port, type=socket.SOCK_STREAM
        )
        addrs = list(dict.fromkeys(str(info[4][0]) for info in infos))
        if not addrs:
            raise OSError(f"{self.endpoint.host} has no address")
        self._addrs, self._addrs_at = addrs, time.monotonic()
        return addrs

    def _tls(self) -> ssl.SSLContext | None:
        if self.endpoint.scheme != "https":
            return None
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl


def _str(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("latin-1")


def _reason(e: BaseException | None) -> str:
    """Why a connection failed, in a few words: the errno's text where there is one
    (``Connection refused``, not asyncio's ``Connect call failed``)."""
    if isinstance(e, OSError):
        if e.errno is not None and e.errno > 0:
            return os.strerror(e.errno)
        if e.strerror:
            return str(e.strerror)
    return type(e).__name__ if e is not None else "unknown"


def _text(e: BaseException | None) -> str:
    if e is None:
        return "unknown"
    text = str(e) or type(e).__name__
    return f"{type(e).__name__}: {text}"[:300]
