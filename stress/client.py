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

Timeouts are one watchdog per request rather than a timer per read: it wakes at the
nearest deadline (first token, then stall since the last byte, and total), re-arms if
activity has moved the deadline, and otherwise cancels the request with a reason.

Pooled keep-alive connections that the server already closed fail instantly with
"Server disconnected" (seen against llama.cpp, field notes): when nothing was exchanged
the request is retried once on a fresh connection and counted in ``reconnects``.

Every request carries ``X-Request-ID`` when its record has a ``request_id`` (the engine
builds one per turn; a re-sent request gets ``-a2``), and the record keeps the ``id`` of
the server's reply (``response_id``), so a request can be found in the server's log.
When the caller passes ``token_times``, the receive time (``perf_counter``) of every chunk
that carried generated text is appended to it: one append per chunk, nothing allocated.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp
import orjson

from stress.record import ErrorClass, RequestRecord
from stress.secrets import safe_url
from stress.sse import MAX_EVENT_BYTES, SSEError, SSEParser

_CONTEXT_PATTERNS = re.compile(
    rb"exceed_context_size|context length|context_length|maximum context|too long|"
    rb"longer than the model|max_model_len|n_ctx",
    re.IGNORECASE,
)
_REASONING_FIELDS = ("reasoning", "reasoning_content")
_ERROR_BODY_LIMIT = 65536
REQUEST_ID_HEADER = "X-Request-ID"
_MAX_RESPONSE_ID = 200


@dataclass(frozen=True, slots=True)
class TimeoutPolicy:
    connect: float
    first_token: float
    stall: float
    total: float


@dataclass(slots=True)
class Reply:
    content: str
    reasoning: str


class _Watchdog:
    """Cancels the request task at the first deadline that really passed.

    Until the first token it sleeps to the nearer of the first-token and total deadlines;
    the first token re-arms it on the stall deadline, measured from the last byte
    (``last``, one attribute store per read), and the total. When it wakes early because
    bytes moved the stall deadline, it sleeps again to the new one: a stream that never
    stalls costs a timer per stall interval, not one per chunk.
    """

    __slots__ = ("fired", "first", "handle", "last", "loop", "policy", "t0", "task")

    def __init__(self, policy: TimeoutPolicy, t0: float) -> None:
        self.loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.policy = policy
        self.t0 = t0
        self.last = t0
        self.first = False
        self.fired: ErrorClass | None = None
        self.handle = self.loop.call_later(min(policy.first_token, policy.total), self._check)

    def _check(self) -> None:
        now = time.perf_counter()
        p = self.policy
        left_total = self.t0 + p.total - now
        if self.first:
            left_other, kind = self.last + p.stall - now, "stall"
        else:
            left_other, kind = self.t0 + p.first_token - now, "first_token_timeout"
        if left_total <= 0:
            self.fired = "total_timeout"
        elif left_other <= 0:
            self.fired = kind  # type: ignore[assignment]
        else:
            self.handle = self.loop.call_later(min(left_total, left_other), self._check)
            return
        self.task.cancel()

    def got_first(self) -> None:
        """The first token arrived: from now on silence is a stall."""
        self.first = True
        self.handle.cancel()
        self._check()

    def stop(self) -> None:
        self.handle.cancel()


class ChatClient:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        headers: dict[str, str],
        timeouts: TimeoutPolicy,
        fresh_session: Callable[[], aiohttp.ClientSession] | None = None,
        clock_t0: float = 0.0,
    ) -> None:
        self.session = session
        self.url = base_url.rstrip("/") + "/v1/chat/completions"
        self.headers = {"Content-Type": "application/json", **headers}
        self._base_headers = {
            k: v for k, v in self.headers.items() if k.lower() != REQUEST_ID_HEADER.lower()
        }
        """The headers without any ``X-Request-ID`` of the scenario's: each request's own wins."""
        self.timeouts = timeouts
        self._fresh_factory = fresh_session
        self._fresh: aiohttp.ClientSession | None = None
        self.t0 = clock_t0
        """perf_counter() at run start; record times are relative to it."""
        self.last_byte = time.perf_counter()
        """When any stream last received bytes (for the hang watch)."""

    async def close(self) -> None:
        if self._fresh is not None:
            await self._fresh.close()

    def _fresh_session(self) -> aiohttp.ClientSession:
        if self._fresh is None:
            if self._fresh_factory is None:
                return self.session
            self._fresh = self._fresh_factory()
        return self._fresh

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
        reply = Reply("", "")
        rec.t_start = time.perf_counter() - self.t0
        base_id = rec.request_id
        try:
            rec.t_sched = t_sched - self.t0
            if await self._attempt(
                self.session, body, rec, reply, t_sched, token_times, may_retry=True
            ):
                rec.reconnects += 1
                if base_id is not None:  # the server may have logged the first attempt
                    rec.request_id = f"{base_id}-a{rec.reconnects + 1}"
                session = self._fresh_session()
                await self._attempt(
                    session, body, rec, reply, t_sched, token_times, may_retry=False
                )
        except asyncio.CancelledError:
            self._fail(rec, "cancelled", "cancelled before the reply finished")
            self._finish(rec, reply)
            raise
        except Exception as e:  # a bug of ours or an unexpected library error: still one record
            self._fail(rec, "client_error", f"stress failed handling the request: {_exc_text(e)}")
        except BaseException as e:  # KeyboardInterrupt, SystemExit: record, then let it go
            self._fail(rec, "client_error", f"interrupted: {_exc_text(e)}")
            self._finish(rec, reply)
            raise
        self._finish(rec, reply)
        return reply

    async def _attempt(
        self,
        session: aiohttp.ClientSession,
        body: bytes,
        rec: RequestRecord,
        reply: Reply,
        t_sched: float,
        token_times: array[float] | None,
        *,
        may_retry: bool,
    ) -> bool:
        """One send. True when it met a dead pooled connection before any reply and may
        be retried on a fresh one; otherwise ``rec`` holds the outcome."""
        headers = self.headers
        if rec.request_id is not None:
            headers = {**self._base_headers, REQUEST_ID_HEADER: rec.request_id}
        t_send = time.perf_counter()
        rec.t_start = t_send - self.t0
        rec.queue_s = t_send - t_sched
        wd = _Watchdog(self.timeouts, t_send)
        exchanged = False
        try:
            async with session.post(
                self.url, data=body, headers=headers, allow_redirects=False
            ) as resp:
                exchanged = True
                rec.t_last_byte = time.perf_counter() - self.t0
                rec.http_status = resp.status
                await self._read_reply(resp, rec, reply, t_send, wd, token_times)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if wd.fired is None or task is None or task.uncancel() > 0:
                raise  # not (only) our watchdog: a real cancellation
            self._fail(rec, wd.fired, _timeout_text(wd.fired, self.timeouts))
        except (
            aiohttp.ServerDisconnectedError,
            aiohttp.ClientOSError,
            aiohttp.ClientConnectionResetError,  # "Cannot write to closing transport"
        ) as e:
            refused = isinstance(e, aiohttp.ClientConnectorError)
            if may_retry and not exchanged and not refused:
                return True
            self._fail(rec, "connect" if refused else "reset", _exc_text(e))
        except aiohttp.ClientPayloadError as e:
            self._fail(rec, "reset", _exc_text(e))
        except aiohttp.ClientResponseError as e:  # aiohttp's HTTP parser refused the reply
            what = " ".join(str(e.message).split())[:300]
            self._fail(rec, "protocol", f"unreadable HTTP response: {what}")
        except (aiohttp.ConnectionTimeoutError, aiohttp.ClientConnectorError) as e:
            self._fail(rec, "connect", _exc_text(e))
        except aiohttp.ClientError as e:
            self._fail(rec, "reset" if exchanged else "connect", _exc_text(e))
        finally:
            wd.stop()
        return False

    # --- response handling ---------------------------------------------------------

    async def _read_reply(
        self,
        resp: aiohttp.ClientResponse,
        rec: RequestRecord,
        reply: Reply,
        t_send: float,
        wd: _Watchdog,
        token_times: array[float] | None,
    ) -> None:
        status = resp.status
        if 300 <= status < 400:
            where = _location_host(resp.headers.get("Location"), self.url)
            self._fail(
                rec,
                "redirect",
                f"HTTP {status}: redirect to {where}, not followed -- fix: point target.url "
                "at the server that answers",
            )
        elif status >= 400:
            await self._http_error(resp, rec)
        elif status < 200:
            self._fail(rec, "protocol", f"HTTP {status} as the final reply to a chat request")
        else:
            ctype = resp.headers.get("Content-Type")
            mime = "" if ctype is None else ctype.partition(";")[0].strip().lower()
            if mime == "application/json":
                await self._read_json(resp, rec, reply, t_send, wd)
            elif mime == "text/event-stream":
                await self._read_stream(resp, rec, reply, t_send, wd, token_times)
            else:
                shown = "(none)" if ctype is None else " ".join(ctype.split())[:100]
                self._fail(
                    rec,
                    "protocol",
                    f"HTTP {status} with Content-Type {shown}: not a chat reply (expected "
                    "text/event-stream or application/json) -- is target.url the inference "
                    "server?",
                )

    async def _http_error(self, resp: aiohttp.ClientResponse, rec: RequestRecord) -> None:
        raw = await resp.content.read(_ERROR_BODY_LIMIT)
        message = _error_message(raw) or resp.reason or ""
        status = resp.status
        cls: ErrorClass
        if status == 429:
            cls = "http_429"
            ra = resp.headers.get("Retry-After")
            if ra is not None:
                with contextlib.suppress(ValueError):
                    wait = float(ra)
                    if 0 <= wait <= _RETRY_AFTER_MAX:  # not inf, NaN or a year
                        rec.retry_after_s = wait
                    else:
                        _note(rec, f"ignored Retry-After {ra[:40]!r}")
        elif status in (400, 413, 422) and _CONTEXT_PATTERNS.search(raw):
            cls = "context_exceeded"
            n = _prompt_tokens_in_error(raw)
            if n is not None:  # the server's own count beats stress's estimate
                rec.prompt_tokens = n
                rec.prompt_source = "error"
        elif status >= 500:
            cls = "http_5xx"
        else:
            cls = "http_4xx"
        self._fail(rec, cls, f"HTTP {status}: {message}"[:500])

    async def _read_stream(
        self,
        resp: aiohttp.ClientResponse,
        rec: RequestRecord,
        reply: Reply,
        t_send: float,
        wd: _Watchdog,
        token_times: array[float] | None,
    ) -> None:
        parser = SSEParser()
        stamp = None if token_times is None else token_times.append
        need_id = True
        content_parts: list[str] = []
        reasoning_parts: list[str] = []
        perf = time.perf_counter
        t0 = self.t0
        t_first: float | None = None
        t_last_tok = 0.0
        t_prev = 0.0
        max_gap = 0.0
        usage: Any = None
        timings: Any = None
        read = resp.content.readany
        malformed = 0
        try:
            while True:
                chunk = await read()
                now = perf()
                wd.last = self.last_byte = now
                rec.t_last_byte = now - t0
                try:
                    events = parser.feed(chunk) if chunk else parser.close()
                except SSEError as e:  # a hostile line: stop before it takes the memory
                    self._fail(rec, "malformed_stream", str(e))
                    return
                for data in events:
                    if data == b"[DONE]":
                        rec.saw_done = True
                        continue
                    try:
                        obj = orjson.loads(data)
                    except orjson.JSONDecodeError:
                        obj = _loads_lenient(data)
                    if obj.__class__ is not dict:
                        malformed += 1
                        continue
                    if need_id:  # the first object: the server's id for this reply
                        need_id = False
                        rec.response_id = _response_id(obj)
                    if t_first is not None:
                        gap = now - t_prev
                        if gap > max_gap:
                            max_gap = gap
                    t_prev = now
                    try:  # a server's odd shapes count as malformed, never as our crash
                        err = obj.get("error")
                        if err:
                            self._stream_error(rec, err)
                            continue
                        u = obj.get("usage")
                        if u:
                            usage = u
                        t = obj.get("timings")
                        if t:
                            timings = t
                        choices = obj.get("choices")
                        if not choices:
                            rec.chunks_empty += 1
                            continue
                        choice = choices[0]
                        delta = choice.get("delta") or {}
                        text = delta.get("content")
                        if text and text.__class__ is not str:
                            raise TypeError("content is not a string")
                        rtext = None
                        for name in _REASONING_FIELDS:
                            rtext = delta.get(name)
                            if rtext:
                                if rtext.__class__ is not str:
                                    raise TypeError("reasoning is not a string")
                                rec.reasoning_field = name
                                break
                        fr = choice.get("finish_reason")
                    except (AttributeError, KeyError, IndexError, TypeError):
                        malformed += 1
                        continue
                    if text or rtext:
                        if t_first is None:
                            t_first = now
                            rec.ttft_s = now - t_send
                            t_prev = now
                            wd.got_first()
                        t_last_tok = now
                        if stamp is not None:
                            stamp(now)
                        if text:
                            if rec.ttfc_s is None:
                                rec.ttfc_s = now - t_send
                            rec.chunks_content += 1
                            content_parts.append(text)
                        if rtext:
                            rec.chunks_reasoning += 1
                            reasoning_parts.append(rtext)
                    else:
                        rec.chunks_empty += 1
                    if fr:
                        rec.finish_reason = _finish_reason(fr)
                if not chunk:
                    break
        finally:  # a stream that broke off keeps what it carried
            reply.content = "".join(content_parts)
            reply.reasoning = "".join(reasoning_parts)
            if t_first is not None:  # the silence that ended the stream counts too
                rec.max_gap_s = max(max_gap, perf() - t_prev)
            if timings is not None:
                rec.server_timings = _clean_timings(rec, timings)
        self._apply_usage(rec, usage, reply)
        if t_first is not None and rec.completion_tokens >= 2 and t_last_tok > t_first:
            rec.decode_tok_s = (rec.completion_tokens - 1) / (t_last_tok - t_first)
        if malformed and rec.error_class is None:
            self._fail(rec, "malformed_stream", f"{malformed} chunk(s) were not valid JSON")

    async def _read_json(
        self,
        resp: aiohttp.ClientResponse,
        rec: RequestRecord,
        reply: Reply,
        t_send: float,
        wd: _Watchdog,
    ) -> None:
        """The server ignored ``stream: true``: TTFT cannot be separated from e2e."""
        rec.streamed = False
        parts: list[bytes] = []
        size = 0
        while chunk := await resp.content.readany():
            wd.last = self.last_byte = now = time.perf_counter()
            rec.t_last_byte = now - self.t0
            size += len(chunk)
            if size > MAX_EVENT_BYTES:
                self._fail(
                    rec, "malformed_stream", f"JSON reply longer than {MAX_EVENT_BYTES >> 20} MiB"
                )
                return
            parts.append(chunk)
        raw = b"".join(parts)
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            obj = _loads_lenient(raw)
        try:
            choice = obj["choices"][0]
            message = choice.get("message") or {}
            content = message.get("content") or ""
            reasoning, field = "", None
            for name in _REASONING_FIELDS:
                if message.get(name):
                    reasoning, field = message[name], name
                    break
            if content.__class__ is not str or reasoning.__class__ is not str:
                raise TypeError("message text is not a string")
            fr = choice.get("finish_reason")
        except (KeyError, IndexError, TypeError, AttributeError):
            if isinstance(obj, dict) and obj.get("error"):  # an error object with HTTP 200
                self._stream_error(rec, obj["error"])
            else:
                self._fail(rec, "malformed_stream", "reply was neither SSE nor a chat completion")
            return
        reply.content = content
        reply.reasoning = reasoning
        rec.reasoning_field = field
        rec.response_id = _response_id(obj)
        rec.finish_reason = _finish_reason(fr) if fr else None
        rec.saw_done = True
        if reply.content or reply.reasoning:
            rec.ttft_s = time.perf_counter() - t_send
            rec.chunks_content = 1 if reply.content else 0
            rec.chunks_reasoning = 1 if reply.reasoning else 0
            if reply.content:
                rec.ttfc_s = rec.ttft_s
        if obj.get("timings"):
            rec.server_timings = _clean_timings(rec, obj["timings"])
        self._apply_usage(rec, obj.get("usage"), reply)

    def _apply_usage(self, rec: RequestRecord, usage: Any, reply: Reply) -> None:
        """Token counts from ``usage`` (else ``timings``, else the chunks), each checked:
        a value that is not a plain count in [0, 2**53) is treated as absent and named
        in the diagnosis, so no server can put a negative or unwritable number in a record."""
        rec.content_chars = len(reply.content)
        rec.reasoning_chars = len(reply.reasoning)
        rejected: list[str] = []
        if not isinstance(usage, dict):
            usage = {}
        completion = _take(usage, "completion_tokens", "usage", rejected)
        prompt = _take(usage, "prompt_tokens", "usage", rejected)
        details = usage.get("prompt_tokens_details")
        cached = _take(details, "cached_tokens", "usage.prompt_tokens_details", rejected)
        cdetails = usage.get("completion_tokens_details")
        reasoning = _take(cdetails, "reasoning_tokens", "usage.completion_tokens_details", rejected)
        if completion is not None:
            if reasoning is not None and reasoning > completion:
                rejected.append(f"reasoning_tokens={reasoning} > completion_tokens={completion}")
                reasoning = None
            rec.completion_tokens = completion
            rec.tokens_source = "usage"
            rec.reasoning_tokens = reasoning if reasoning is not None else rec.chunks_reasoning
        else:
            rec.completion_tokens = rec.chunks_content + rec.chunks_reasoning
            rec.reasoning_tokens = rec.chunks_reasoning
            rec.tokens_source = "chunks"
        if prompt is not None:
            rec.prompt_tokens = prompt
            rec.prompt_source = "usage"
        if cached is not None:
            rec.cached_tokens = cached
            rec.cache_source = "usage"
        t = rec.server_timings
        if t:  # already cleaned: every value is a plain finite number
            cache_n, prompt_n = t.get("cache_n"), t.get("prompt_n")
            if rec.cached_tokens is None and cache_n.__class__ is int:
                rec.cached_tokens = cache_n
                rec.cache_source = "timings"
            if rec.prompt_tokens is None and prompt_n.__class__ is int:
                rec.prompt_tokens = _count(prompt_n + (cache_n if cache_n.__class__ is int else 0))
                rec.prompt_source = "timings" if rec.prompt_tokens is not None else "estimate"
        if (
            rec.cached_tokens is not None
            and rec.prompt_tokens is not None
            and rec.cached_tokens > rec.prompt_tokens
        ):
            rejected.append(
                f"cached_tokens={rec.cached_tokens} > prompt_tokens={rec.prompt_tokens}"
            )
            rec.cached_tokens = None
            rec.cache_source = None
        if rejected:
            _note(rec, "ignored server token counts that are not counts: " + ", ".join(rejected))

    def _stream_error(self, rec: RequestRecord, err: Any) -> None:
        message = err.get("message") if isinstance(err, dict) else str(err)
        raw = orjson.dumps(err)
        cls: ErrorClass = "context_exceeded" if _CONTEXT_PATTERNS.search(raw) else "stream_error"
        if cls == "context_exceeded" and rec.error_class is None:
            n = _prompt_tokens_in_error(raw)
            if n is not None:
                rec.prompt_tokens = n
                rec.prompt_source = "error"
        self._fail(rec, cls, f"error in stream: {message}"[:500])

    @staticmethod
    def _fail(rec: RequestRecord, cls: ErrorClass, message: str) -> None:
        if rec.error_class is None or cls == "cancelled":
            rec.error_class = cls
            rec.error = message

    def _finish(self, rec: RequestRecord, reply: Reply) -> None:
        """Close the record: duration, counts, outcome, and a last check that an ``ok`` is
        one (defence in depth: a record that claims success without the evidence is a
        ``client_error``, never a fake success)."""
        rec.e2e_s = time.perf_counter() - self.t0 - rec.t_start
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
                _note(rec, "the reply's content was only whitespace: no answer")
        except Exception as e:  # pragma: no cover - a bug of ours must still give a record
            self._fail(rec, "client_error", f"stress failed closing the record: {_exc_text(e)}")
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
        _note(
            rec,
            "stream ended without a finish_reason" + ("" if rec.saw_done else " or [DONE]"),
        )
    elif rec.content_chars == 0 and rec.reasoning_chars == 0:
        rec.outcome = "empty"
        if rec.finish_reason == "length":
            _note(rec, "max_tokens reached before any text: raise request.max_tokens")
        else:
            _note(rec, "HTTP 200 with no generated text")
    elif rec.content_chars == 0:
        rec.outcome = "reasoning_only"
        if rec.finish_reason == "length":
            _note(
                rec,
                "max_tokens was used up by reasoning: raise request.max_tokens "
                "(1,500-2,000 is the practical floor for thinking models)",
            )
        else:
            _note(
                rec,
                f"no answer: the model reasoned, then ended (finish_reason "
                f"{rec.finish_reason}) without writing any content",
            )
    else:
        rec.outcome = "ok"


def _note(rec: RequestRecord, text: str) -> None:
    """Add to the record's diagnosis (several findings can apply to one request)."""
    rec.diagnosis = text if not rec.diagnosis else f"{rec.diagnosis}; {text}"


_MAX_COUNT = 1 << 53
"""Counts at or above this are not token counts (and break float sums and JSON readers)."""
_RETRY_AFTER_MAX = 86400.0


def _count(value: Any) -> int | None:
    """A token count from a server, or None: a plain int (a bool is not), 0 <= v < 2**53."""
    return value if value.__class__ is int and 0 <= value < _MAX_COUNT else None


def _take(obj: Any, key: str, path: str, rejected: list[str]) -> int | None:
    """``obj[key]`` as a count; a value that is present but no count is named in
    ``rejected``."""
    if not isinstance(obj, dict):
        return None
    value = obj.get(key)
    if value is None:
        return None
    n = _count(value)
    if n is None:
        rejected.append(f"{path}.{key}={_shown(value)}")
    return n


def _shown(value: Any) -> str:
    return repr(value)[:40]


def _clean_timings(rec: RequestRecord, raw: Any) -> dict[str, Any] | None:
    """The server's ``timings`` with only plain finite numbers kept (the record must stay
    writable); what was dropped is named in the diagnosis."""
    if not isinstance(raw, dict):
        _note(rec, f"ignored timings that are not an object: {_shown(raw)}")
        return None
    out: dict[str, Any] = {}
    rejected: list[str] = []
    for key, value in list(raw.items())[:64]:
        if value.__class__ is int:
            ok = _count(value) is not None
        elif value.__class__ is float:
            ok = math.isfinite(value) and abs(value) < _MAX_COUNT
        else:
            ok = False
        if ok and len(key) <= 64:
            out[key] = value
        else:
            rejected.append(f"timings.{key[:64]}={_shown(value)}")
    if rejected:
        _note(rec, "ignored server timings that are not plain numbers: " + ", ".join(rejected))
    return out


def _response_id(obj: dict[str, Any]) -> str | None:
    """The reply's ``id`` when it is a short string (what a server's log can carry)."""
    value = obj.get("id")
    return value if value.__class__ is str and len(value) <= _MAX_RESPONSE_ID else None


def _finish_reason(value: Any) -> str:
    return value if value.__class__ is str and len(value) <= 64 else _shown(value)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _loads_lenient(data: bytes) -> Any:
    """What orjson refused but the JSON grammar allows (numbers beyond a double, such as
    ``1e400``), parsed by the standard library; None when it is not JSON or holds text
    that could not be written back (lone surrogates). Only runs after orjson failed."""
    try:
        obj = json.loads(data, parse_constant=_reject_constant)
        orjson.dumps(obj)  # the record and the next request body must stay writable
    except (ValueError, TypeError, RecursionError):
        return None
    return obj


_PROMPT_COUNTS = (
    re.compile(rb'"n_prompt_tokens"\s*:\s*(\d{1,15})'),  # llama.cpp's error object
    re.compile(rb"request has (\d{1,15}) input tokens"),  # vLLM
    re.compile(rb"\((\d{1,15}) in the messages"),  # older vLLM
    re.compile(rb"input \((\d{1,15}) tokens\)"),  # SGLang
    re.compile(rb"request \((\d{1,15}) tokens\)"),  # llama.cpp's message
)


def _prompt_tokens_in_error(raw: bytes) -> int | None:
    """The prompt's token count as a context-overflow error states it, if it does."""
    for pattern in _PROMPT_COUNTS:
        m = pattern.search(raw)
        if m:
            return _count(int(m.group(1)))
    return None


def _location_host(location: str | None, base: str) -> str:
    """Where a redirect points, as scheme://host:port only (no credentials, path or query)."""
    if not location:
        return "no Location"
    try:
        parts = urlsplit(safe_url(urljoin(base, location)))
    except ValueError:
        return "an unparsable Location"
    return f"{parts.scheme}://{parts.netloc}"[:200] if parts.netloc else "an unparsable Location"


def _error_message(raw: bytes) -> str:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw[:300].decode("utf-8", "replace").strip()
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            return str(err.get("message") or err.get("detail") or err)[:300]
        if isinstance(obj.get("detail"), str | list):
            return str(obj["detail"])[:300]
        return str(err)[:300]
    return str(obj)[:300]


def _exc_text(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return f"{type(e).__name__}: {text}"[:300]


def _timeout_text(kind: ErrorClass, p: TimeoutPolicy) -> str:
    return {
        "first_token_timeout": f"no generated token within {p.first_token:g}s",
        "stall": f"no bytes for {p.stall:g}s after the first token",
        "total_timeout": f"request exceeded {p.total:g}s in total",
    }.get(kind, kind)
