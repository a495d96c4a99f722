"""Streaming OpenAI chat client: one request in, one classified record out.

Never raises in the request path (except to let a cancellation through after recording
it): whatever fails, in the server, the network, aiohttp or stress itself (``client_error``),
the record says so, and an ``ok`` must show a 2xx status, a duration and a finish_reason.
It separates time to first token from decode (field note 2), reads generated text from
``delta.content``, ``delta.reasoning`` and ``delta.reasoning_content`` and counts the
chunks that carried each (field note 3), and classifies every failure. A redirect is never
followed (it could carry the prompt and the key elsewhere); a 200 that is not SSE or JSON
is a ``protocol`` error. Numbers from the server are checked before they reach a record:
a token count must be a plain int in [0, 2**53).

Timeouts are a watchdog per request (first token, then stall since the last byte, and
total), all checked by one sweeping timer (``stress.net.deadlines``); a request past a
deadline is cancelled with the reason.

Requests go over ``stress.net.http1``'s keep-alive pool and their replies are read by
``stress.net.reply.ReplyReader`` inside the connection's read callback: the request's task
sleeps until the reply has ended. Pooled keep-alive connections that the server already
closed fail at once (seen against llama.cpp, field notes): when not a byte of the reply
came back the request is re-sent once on a fresh connection and counted in ``reconnects``.

Every request carries ``X-Request-ID`` when its record has a ``request_id`` (the engine
builds one per turn; a re-sent request gets ``-a2``), and the record keeps the ``id`` of
the server's reply (``response_id``), so a request can be found in the server's log.
When the caller passes ``token_times``, the receive time (``perf_counter``) of every chunk
that carried generated text is appended to it: one append per chunk, nothing allocated.
"""

from __future__ import annotations

import asyncio
import time
from array import array

from stress.core.record import ErrorClass, RequestRecord
from stress.net.deadlines import Deadlines, TimeoutPolicy
from stress.net.http1 import ConnectError, Endpoint, Pool, request_head
from stress.net.reply import Clock, Reply, ReplyReader, fail, note

REQUEST_ID_HEADER = "X-Request-ID"


class ChatClient:
    """Sends chat requests to one server over one keep-alive pool; each ends in its record.

    ``limit`` bounds the open connections (a request over it waits for one); ``reuse``
    off opens a connection per request and says ``Connection: close``."""

    def __init__(
        self,
        base_url: str,
        headers: dict[str, str],
        timeouts: TimeoutPolicy,
        *,
        limit: int,
        reuse: bool = True,
        clock_t0: float = 0.0,
    ) -> None:
        endpoint = Endpoint.parse(base_url)
        self.url = base_url.rstrip("/") + "/v1/chat/completions"
        self.pool = Pool(endpoint, limit=limit, connect_s=timeouts.connect, reuse=reuse)
        path = "/v1/chat/completions"
        own_id = {k: v for k, v in headers.items() if k.lower() != REQUEST_ID_HEADER.lower()}
        self._head = request_head(endpoint, path, headers, close=not reuse)
        """For a request without an id of its own (the scenario's ``X-Request-ID``, if any)."""
        self._head_for_id = request_head(endpoint, path, own_id, close=not reuse)
        self.timeouts = timeouts
        self.deadlines = Deadlines(timeouts)
        self.clock = Clock(clock_t0, time.perf_counter())
        """The run clock's origin (record times are relative to it) and the last byte any
        stream received (for the hang watch)."""
        self.first_written = asyncio.Event()
        """Set once a request has been written to its connection (the GPU telemetry opens
        after it, so its start-up does not delay the first request)."""

    @property
    def t0(self) -> float:
        return self.clock.t0

    @t0.setter
    def t0(self, value: float) -> None:
        self.clock.t0 = value

    @property
    def last_byte(self) -> float:
        return self.clock.last_byte

    async def close(self) -> None:
        await self.pool.close()

    async def chat(
        self,
        body: bytes,
        rec: RequestRecord,
        t_sched: float,
        token_times: array[float] | None = None,
    ) -> Reply:
        """Send one streamed chat request; fill ``rec`` completely; return the text.

        ``token_times`` (optional) receives the ``perf_counter`` time of every chunk that
        carried generated text, in order; its first entry is ``ttft_s`` after the send.

        Total: whatever fails, here or in a library, ``rec`` ends classified with ``e2e_s``
        set. Only a cancellation propagates, after it was recorded.
        """
        reply = Reply()
        rec.t_start = time.perf_counter() - self.clock.t0
        base_id = rec.request_id
        try:
            rec.t_sched = t_sched - self.clock.t0
            if await self._attempt(body, rec, reply, t_sched, token_times, may_retry=True):
                rec.reconnects += 1
                if base_id is not None:  # the server may have logged the first attempt
                    rec.request_id = f"{base_id}-a{rec.reconnects + 1}"
                await self._attempt(body, rec, reply, t_sched, token_times, may_retry=False)
        except asyncio.CancelledError:
            fail(rec, "cancelled", "cancelled before the reply finished")
            self._finish(rec, reply)
            raise
        except Exception as e:  # a bug of ours or an unexpected library error: still one record
            fail(rec, "client_error", f"stress failed handling the request: {_exc_text(e)}")
        except BaseException as e:  # KeyboardInterrupt, SystemExit: record, then let it go
            fail(rec, "client_error", f"interrupted: {_exc_text(e)}")
            self._finish(rec, reply)
            raise
        self._finish(rec, reply)
        return reply

    async def _attempt(
        self,
        body: bytes,
        rec: RequestRecord,
        reply: Reply,
        t_sched: float,
        token_times: array[float] | None,
        *,
        may_retry: bool,
    ) -> bool:
        """One send. True when the connection closed before a byte of the reply and the
        request may be re-sent on a fresh one; otherwise ``rec`` holds the outcome."""
        rid = rec.request_id
        if rid is None:
            head = self._head
        else:
            head = b"%s%s: %s\r\n" % (self._head_for_id, REQUEST_ID_HEADER.encode(), rid.encode())
        head = b"%sContent-Length: %d\r\n\r\n" % (head, len(body))
        t_send = time.perf_counter()
        rec.t_start = t_send - self.clock.t0
        rec.queue_s = t_send - t_sched
        wd = self.deadlines.start(t_send)
        reader = ReplyReader(self.clock, self.url, rec, reply, t_send, wd, token_times)
        conn = None
        try:
            conn = await self.pool.acquire(fresh=not may_retry)
            if conn.waited_s:  # the pool was full: that wait is queueing, not server time
                reader.t_send = reader.now = reader.t_send + conn.waited_s
                rec.t_start += conn.waited_s
                rec.queue_s += conn.waited_s
            conn.send(head, body, reader)
            if not self.first_written.is_set():
                self.first_written.set()
            await reader.done
        except ConnectError as e:
            fail(rec, "connect", str(e))
        except asyncio.CancelledError:
            reader.abandon()
            task = asyncio.current_task()
            if wd.fired is None or task is None or task.uncancel() > 0:
                raise  # not (only) our watchdog: a real cancellation
            fail(rec, wd.fired, _timeout_text(wd.fired, self.timeouts))
        finally:
            self.deadlines.stop(wd)
            if conn is not None:
                self.pool.release(conn)  # kept only after a complete reply
        if reader.dropped:
            if may_retry:
                return True
            fail(rec, "reset", reader.drop_message)
        return False

    def _finish(self, rec: RequestRecord, reply: Reply) -> None:
        """Close the record: duration, counts, outcome, and a last check that an ``ok`` is
        one (defence in depth: a record that claims success without the evidence is a
        ``client_error``, never a fake success)."""
        rec.e2e_s = time.perf_counter() - self.clock.t0 - rec.t_start
        try:
            rec.content_chars = len(reply.content)
            rec.reasoning_chars = len(reply.reasoning)
            if rec.tokens_source == "chunks" and not rec.completion_tokens:
                # a stream that failed part-way: count what arrived
                rec.completion_tokens = rec.chunks_content + rec.chunks_reasoning
                rec.reasoning_tokens = rec.chunks_reasoning
            classify(rec)
            if rec.outcome == "ok" and reply.content.isspace():
                rec.outcome = "reasoning_only" if reply.reasoning else "empty"
                note(rec, "the reply's content was only whitespace: no answer")
        except Exception as e:  # pragma: no cover - a bug of ours must still give a record
            fail(rec, "client_error", f"stress failed closing the record: {_exc_text(e)}")
            rec.outcome = "error"
        _check_ok(rec)


def _check_ok(rec: RequestRecord) -> None:
    """An ``ok`` needs a 2xx status, a duration and a finish_reason; an error needs a class."""
    if rec.outcome == "ok":
        status = rec.http_status
        missing = [
            what
            for what, bad in (
                (f"HTTP status 2xx (got {status})", status is None or not 200 <= status < 300),
                ("e2e_s", rec.e2e_s is None),
                ("a finish_reason", rec.finish_reason is None),
                ("no error class", rec.error_class is not None),
            )
            if bad
        ]
        if missing:
            rec.outcome = "error"
            rec.error_class = "client_error"
            rec.error = "stress's own check refused an ok without " + ", ".join(missing)
    elif rec.outcome == "error" and rec.error_class is None:
        rec.error_class = "client_error"
        rec.error = "stress's own check: an error without a class"


def classify(rec: RequestRecord) -> None:
    """Set ``outcome`` (and a diagnosis) from what the stream carried."""
    if rec.error_class is not None:
        rec.outcome = "error"
    elif rec.finish_reason is None:
        rec.outcome = "truncated"
        note(
            rec,
            "stream ended without a finish_reason" + ("" if rec.saw_done else " or [DONE]"),
        )
    elif rec.content_chars == 0 and rec.reasoning_chars == 0:
        rec.outcome = "empty"
        if rec.finish_reason == "length":
            note(rec, "max_tokens reached before any text: raise request.max_tokens")
        else:
            note(rec, "HTTP 200 with no generated text")
    elif rec.content_chars == 0:
        rec.outcome = "reasoning_only"
        if rec.finish_reason == "length":
            note(
                rec,
                "max_tokens was used up by reasoning: raise request.max_tokens "
                "(1,500-2,000 is the practical floor for thinking models)",
            )
        else:
            note(
                rec,
                f"no answer: the model reasoned, then ended (finish_reason "
                f"{rec.finish_reason}) without writing any content",
            )
    else:
        rec.outcome = "ok"


def _exc_text(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return f"{type(e).__name__}: {text}"[:300]


def _timeout_text(kind: ErrorClass, p: TimeoutPolicy) -> str:
    return {
        "first_token_timeout": f"no generated token within {p.first_token:g}s",
        "stall": f"no bytes for {p.stall:g}s after the first token",
        "total_timeout": f"request exceeded {p.total:g}s in total",
    }.get(kind, kind)
