"""Reads one chat reply into its record, inside the connection's read callback.

:class:`ReplyReader` is the :class:`stress.net.http1.Sink` of one request: the connection hands
it every read's instant, the reply's head and each piece of its body as they arrive, and it
fills the record as the bytes come (time to first token, decode, the chunks that carried
content and reasoning, finish reason, usage), so nothing is buffered or queued per chunk and
the request's task wakes once, when the reply has ended (``done``).

What it decides, and where it says so in the record: a redirect is never followed (it
could carry the prompt and the key elsewhere); a 2xx that is not SSE or JSON is a
``protocol`` error; an error status keeps the first 64 KiB of its body for the message
(and a context overflow the server's prompt count); a stream's chunks are read from
``delta.content``, ``delta.reasoning`` and ``delta.reasoning_content`` (field note 3);
numbers from the server are checked before they reach a record (a token count must be a
plain int in [0, 2**53)).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
import time
from array import array
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

import orjson

from stress.core.record import ErrorClass, RequestRecord
from stress.core.secrets import safe_url
from stress.net.http1 import FailKind, Head
from stress.net.sse import MAX_EVENT_BYTES, SSEError, SSEParser

if TYPE_CHECKING:
    from stress.net.deadlines import Watchdog

CONTEXT_PATTERNS = re.compile(
    rb"exceed_context_size|context length|context_length|maximum context|too long|"
    rb"longer than the model|max_model_len|n_ctx",
    re.IGNORECASE,
)
_REASONING_FIELDS = ("reasoning", "reasoning_content")
_ERROR_BODY_LIMIT = 65536
_MAX_RESPONSE_ID = 200

# what the reader is doing with the body
_HEAD, _STREAM, _JSON, _ERROR, _DONE = range(5)


class Reply:
    __slots__ = ("content", "reasoning")

    def __init__(self, content: str = "", reasoning: str = "") -> None:
        self.content = content
        self.reasoning = reasoning


class Clock:
    """What every request of a client shares: the run clock's origin and the last byte
    any stream received (the hang watch reads it)."""

    __slots__ = ("last_byte", "t0")

    def __init__(self, t0: float, now: float) -> None:
        self.t0 = t0
        self.last_byte = now


class ReplyReader:
    """The reply of one attempt, read as it arrives; ``done`` resolves when it has ended
    (or failed, or was stopped early). ``dropped`` is set when the connection closed before
    a byte of the reply: the caller may re-send the request once."""

    __slots__ = (
        "_body",
        "_body_len",
        "_content",
        "_first",
        "_head",
        "_last_tok",
        "_malformed",
        "_max_gap",
        "_mode",
        "_need_id",
        "_prev",
        "_reasoning",
        "_sse",
        "_stamp",
        "_timings",
        "_usage",
        "clock",
        "done",
        "drop_message",
        "dropped",
        "now",
        "rec",
        "reply",
        "t_send",
        "url",
        "wd",
    )

    def __init__(
        self,
        clock: Clock,
        url: str,
        rec: RequestRecord,
        reply: Reply,
        t_send: float,
        wd: Watchdog,
        token_times: array[float] | None,
    ) -> None:
        self.clock = clock
        self.url = url
        self.rec = rec
        self.reply = reply
        self.t_send = t_send
        self.now = t_send
        self.wd = wd
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.dropped = False
        self.drop_message = ""
        self._mode = _HEAD
        self._head: Head | None = None
        self._stamp = None if token_times is None else token_times.append
        self._sse: SSEParser | None = None
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._body: list[bytes] = []
        self._body_len = 0
        self._first: float | None = None
        self._last_tok = 0.0
        self._prev = 0.0
        self._max_gap = 0.0
        self._need_id = True
        self._usage: Any = None
        self._timings: Any = None
        self._malformed = 0

    # --- the connection's calls (stress.net.http1.Sink) --------------------------------------

    def on_data(self, now: float) -> None:
        self.now = now
        self.wd.last = now
        clock = self.clock
        clock.last_byte = now
        self.rec.t_last_byte = now - clock.t0

    def on_head(self, head: Head) -> None:
        rec = self.rec
        rec.http_status = status = head.status
        self._head = head
        if 300 <= status < 400:
            where = _location_host(head.location, self.url)
            self._stop(
                "redirect",
                f"HTTP {status}: redirect to {where}, not followed -- fix: point target.url "
                "at the server that answers",
            )
        elif status >= 400:
            self._mode = _ERROR
        elif status < 200:
            self._stop("protocol", f"HTTP {status} as the final reply to a chat request")
        else:
            ctype = head.content_type
            mime = "" if ctype is None else ctype.partition(";")[0].strip().lower()
            if mime == "text/event-stream":
                self._mode = _STREAM
                self._sse = SSEParser()
            elif mime == "application/json":
                self._mode = _JSON
                rec.streamed = False
            else:
                shown = "(none)" if ctype is None else " ".join(ctype.split())[:100]
                self._stop(
                    "protocol",
                    f"HTTP {status} with Content-Type {shown}: not a chat reply (expected "
                    "text/event-stream or application/json) -- is target.url the inference "
                    "server?",
                )

    def on_body(self, data: bytes) -> None:
        mode = self._mode
        if mode == _STREAM:
            assert self._sse is not None
            try:
                events = self._sse.feed(data)
            except SSEError as e:  # a hostile line: stop before it takes the memory
                self._end_stream(usage=False)
                self._stop("malformed_stream", str(e))
                return
            if events:
                self._events(events)
        elif mode == _JSON:
            self._body_len += len(data)
            if self._body_len > MAX_EVENT_BYTES:
                self._stop(
                    "malformed_stream", f"JSON reply longer than {MAX_EVENT_BYTES >> 20} MiB"
                )
                return
            self._body.append(data)
        elif mode == _ERROR:
            self._body.append(data)
            self._body_len += len(data)
            if self._body_len >= _ERROR_BODY_LIMIT:  # enough for the message: stop reading
                self._http_error()
                self._stop()

    def on_end(self) -> None:
        mode = self._mode
        if mode == _STREAM:
            assert self._sse is not None
            try:
                events = self._sse.close()
            except SSEError as e:
                self._end_stream(usage=False)
                self._stop("malformed_stream", str(e))
                return
            if events:
                self._events(events)
            self._end_stream(usage=True)
        elif mode == _JSON:
            self._json(b"".join(self._body))
        elif mode == _ERROR:
            self._http_error()
        self._stop()

    def on_error(self, kind: FailKind, message: str) -> None:
        if self.done.done():
            return
        if kind == "dropped":
            self.dropped = True
            self.drop_message = message
            self._stop()
            return
        if self._mode == _STREAM:
            self._end_stream(usage=False)  # a stream that broke off keeps what it carried
        elif self._mode == _ERROR and kind == "reset":
            # the server said no (a 413 for a body it would not read, then closed): that
            # status is the outcome, not the close that followed it
            self._http_error()
        self._stop(kind, message)

    # --- the caller's ---------------------------------------------------------------------

    def abandon(self) -> None:
        """The request was cancelled (a deadline, or the user): keep what the stream carried."""
        if self._mode == _STREAM:
            self._end_stream(usage=False)
        self._mode = _DONE

    # --- reading ----------------------------------------------------------------------------

    def _stop(self, cls: ErrorClass | None = None, message: str = "") -> None:
        if cls is not None:
            fail(self.rec, cls, message)
        self._mode = _DONE
        if not self.done.done():
            self.done.set_result(None)

    def _events(self, events: list[bytes]) -> None:
        """The events of one read (they share its instant ``now``). On the hot path: state
        is kept in locals and written back once per read."""
        # one function: the per-chunk loop; a call per chunk costs ~5% in benchmarks/reply_path.py
        rec = self.rec
        now = self.now
        first = self._first
        loads = orjson.loads
        content = self._content.append
        stamp = self._stamp
        n_content = n_reasoning = n_empty = 0
        gap_seen = False
        for data in events:
            if data == b"[DONE]":
                rec.saw_done = True
                continue
            try:
                obj = loads(data)
            except orjson.JSONDecodeError:
                obj = _loads_lenient(data)
            if obj.__class__ is not dict:
                self._malformed += 1
                continue
            if not gap_seen:  # the time since the last event (later ones in this read: 0)
                gap_seen = True
                if self._need_id:  # the first object: the server's id for this reply
                    self._need_id = False
                    rec.response_id = _response_id(obj)
                if first is not None and now - self._prev > self._max_gap:
                    self._max_gap = now - self._prev
                self._prev = now
            try:  # a server's odd shapes count as malformed, never as our crash
                err = obj.get("error")
                if err:
                    stream_error(rec, err)
                    continue
                u = obj.get("usage")
                if u:
                    self._usage = u
                t = obj.get("timings")
                if t:
                    self._timings = t
                choices = obj.get("choices")
                if not choices:
                    n_empty += 1
                    continue
                choice = choices[0]
                delta = choice.get("delta") or {}
                text = delta.get("content")
                if text and text.__class__ is not str:
                    raise TypeError("content is not a string")
                rtext = None
                if len(delta) > 1 or text is None:  # only then can it carry reasoning
                    for name in _REASONING_FIELDS:
                        rtext = delta.get(name)
                        if rtext:
                            if rtext.__class__ is not str:
                                raise TypeError("reasoning is not a string")
                            rec.reasoning_field = name
                            break
                fr = choice.get("finish_reason")
            except (AttributeError, KeyError, IndexError, TypeError):
                self._malformed += 1
                continue
            if text or rtext:
                if first is None:
                    first = self._first = now
                    rec.ttft_s = now - self.t_send
                    self.wd.got_first()
                if stamp is not None:
                    stamp(now)
                if text:
                    if rec.ttfc_s is None:
                        rec.ttfc_s = now - self.t_send
                    n_content += 1
                    content(text)
                if rtext:
                    n_reasoning += 1
                    self._reasoning.append(rtext)
            else:
                n_empty += 1
            if fr:
                rec.finish_reason = _finish_reason(fr)
        if n_content or n_reasoning:
            self._last_tok = now
            rec.chunks_content += n_content
            rec.chunks_reasoning += n_reasoning
        if n_empty:
            rec.chunks_empty += n_empty

    def _end_stream(self, *, usage: bool) -> None:
        """The stream is over (ended, broke off or was stopped): the text, the longest
        silence, the server's timings; with ``usage``, the token counts and decode speed."""
        rec = self.rec
        reply = self.reply
        reply.content = "".join(self._content)
        reply.reasoning = "".join(self._reasoning)
        self._mode = _DONE
        first = self._first
        if first is not None:  # the silence that ended the stream counts too
            rec.max_gap_s = max(self._max_gap, time.perf_counter() - self._prev)
        if self._timings is not None:
            rec.server_timings = _clean_timings(rec, self._timings)
        if not usage:
            return
        apply_usage(rec, self._usage, reply)
        if first is not None and rec.completion_tokens >= 2 and self._last_tok > first:
            rec.decode_tok_s = (rec.completion_tokens - 1) / (self._last_tok - first)
        if self._malformed and rec.error_class is None:
            fail(rec, "malformed_stream", f"{self._malformed} chunk(s) were not valid JSON")

    def _json(self, raw: bytes) -> None:
        """The server ignored ``stream: true``: TTFT cannot be separated from e2e."""
        rec = self.rec
        reply = self.reply
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
                stream_error(rec, obj["error"])
            else:
                fail(rec, "malformed_stream", "reply was neither SSE nor a chat completion")
            return
        reply.content = content
        reply.reasoning = reasoning
        rec.reasoning_field = field
        rec.response_id = _response_id(obj)
        rec.finish_reason = _finish_reason(fr) if fr else None
        rec.saw_done = True
        if reply.content or reply.reasoning:
            rec.ttft_s = self.now - self.t_send
            rec.chunks_content = 1 if reply.content else 0
            rec.chunks_reasoning = 1 if reply.reasoning else 0
            if reply.content:
                rec.ttfc_s = rec.ttft_s
        if obj.get("timings"):
            rec.server_timings = _clean_timings(rec, obj["timings"])
        apply_usage(rec, obj.get("usage"), reply)

    def _http_error(self) -> None:
        head = self._head
        assert head is not None
        rec = self.rec
        raw = b"".join(self._body)[:_ERROR_BODY_LIMIT]
        self._body = []
        message = _error_message(raw) if raw else ""
        message = message or head.reason
        status = head.status
        cls: ErrorClass
        if status == 429:
            cls = "http_429"
            ra = head.retry_after
            if ra is not None:
                with contextlib.suppress(ValueError):
                    wait = float(ra)
                    if 0 <= wait <= _RETRY_AFTER_MAX:  # not inf, NaN or a year
                        rec.retry_after_s = wait
                    else:
                        note(rec, f"ignored Retry-After {ra[:40]!r}")
        elif status in (400, 413, 422) and CONTEXT_PATTERNS.search(raw):
            cls = "context_exceeded"
            n = _prompt_tokens_in_error(raw)
            if n is not None:  # the server's own count beats stress's estimate
                rec.prompt_tokens = n
                rec.prompt_source = "error"
        elif status >= 500:
            cls = "http_5xx"
        else:
            cls = "http_4xx"
        fail(rec, cls, f"HTTP {status}: {message}"[:500])


def fail(rec: RequestRecord, cls: ErrorClass, message: str) -> None:
    """Classify ``rec`` as failed (the first failure stands; a cancellation overrides)."""
    if rec.error_class is None or cls == "cancelled":
        rec.error_class = cls
        rec.error = message


def note(rec: RequestRecord, text: str) -> None:
    """Add to the record's diagnosis (several findings can apply to one request)."""
    rec.diagnosis = text if not rec.diagnosis else f"{rec.diagnosis}; {text}"


def apply_usage(rec: RequestRecord, usage: Any, reply: Reply) -> None:
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
        rejected.append(f"cached_tokens={rec.cached_tokens} > prompt_tokens={rec.prompt_tokens}")
        rec.cached_tokens = None
        rec.cache_source = None
    if rejected:
        note(rec, "ignored server token counts that are not counts: " + ", ".join(rejected))


def stream_error(rec: RequestRecord, err: Any) -> None:
    message = err.get("message") if isinstance(err, dict) else str(err)
    raw = orjson.dumps(err)
    cls: ErrorClass = "context_exceeded" if CONTEXT_PATTERNS.search(raw) else "stream_error"
    if cls == "context_exceeded" and rec.error_class is None:
        n = _prompt_tokens_in_error(raw)
        if n is not None:
            rec.prompt_tokens = n
            rec.prompt_source = "error"
    fail(rec, cls, f"error in stream: {message}"[:500])


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
        note(rec, f"ignored timings that are not an object: {_shown(raw)}")
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
        note(rec, "ignored server timings that are not plain numbers: " + ", ".join(rejected))
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


def _location_host(location: str | None, base: str) -> str:
    """Where a redirect points, as scheme://host:port only (no credentials, path or query)."""
    if not location:
        return "no Location"
    try:
        parts = urlsplit(safe_url(urljoin(base, location)))
    except ValueError:
        return "an unparsable Location"
    return f"{parts.scheme}://{parts.netloc}"[:200] if parts.netloc else "an unparsable Location"
