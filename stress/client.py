"""Streaming OpenAI chat client: one request in, one classified record out.

Never raises in the request path (except to let a cancellation through after recording
it). It separates time to first token from decode (field note 2), reads generated text
from ``delta.content``, ``delta.reasoning`` and ``delta.reasoning_content`` and counts the
chunks that carried each (field note 3), and classifies every failure.

Timeouts are one watchdog per request rather than a timer per read: it wakes at the
nearest deadline (first token, stall since the last byte, total), re-arms if activity has
moved the deadline, and otherwise cancels the request with a reason.

Pooled keep-alive connections that the server already closed fail instantly with
"Server disconnected" (seen against llama.cpp, field notes): when nothing was exchanged
the request is retried once on a fresh connection and counted in ``reconnects``.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from stress.record import ErrorClass, RequestRecord
from stress.sse import SSEParser

_CONTEXT_PATTERNS = re.compile(
    rb"exceed_context_size|context length|context_length|maximum context|too long|"
    rb"longer than the model|max_model_len|n_ctx",
    re.IGNORECASE,
)
_REASONING_FIELDS = ("reasoning", "reasoning_content")
_ERROR_BODY_LIMIT = 65536


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


class _Expired(Exception):
    def __init__(self, kind: ErrorClass) -> None:
        self.kind = kind


class _Watchdog:
    """Cancels the request task at the first deadline that really passed."""

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

    async def chat(self, body: bytes, rec: RequestRecord, t_sched: float) -> Reply:
        """Send one streamed chat request; fill ``rec`` completely; return the text."""
        reply = Reply("", "")
        rec.t_sched = t_sched - self.t0
        session = self.session
        for attempt in (0, 1):
            t_send = time.perf_counter()
            rec.t_start = t_send - self.t0
            rec.queue_s = t_send - t_sched
            wd = _Watchdog(self.timeouts, t_send)
            exchanged = False
            try:
                async with session.post(self.url, data=body, headers=self.headers) as resp:
                    exchanged = True
                    rec.http_status = resp.status
                    if resp.status >= 400:
                        await self._http_error(resp, rec)
                    else:
                        ctype = resp.headers.get("Content-Type", "")
                        if ctype.startswith("application/json"):
                            await self._read_json(resp, rec, reply, t_send, wd)
                        else:
                            await self._read_stream(resp, rec, reply, t_send, wd)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if wd.fired is not None and task is not None and task.uncancel() == 0:
                    self._fail(rec, wd.fired, _timeout_text(wd.fired, self.timeouts))
                else:
                    self._fail(rec, "cancelled", "cancelled before the reply finished")
                    self._finish(rec, t_send, reply)
                    wd.stop()
                    raise
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
                if (
                    not exchanged
                    and attempt == 0
                    and not isinstance(e, aiohttp.ClientConnectorError)
                ):
                    wd.stop()
                    rec.reconnects += 1
                    session = self._fresh_session()
                    continue
                cls: ErrorClass = (
                    "connect" if isinstance(e, aiohttp.ClientConnectorError) else "reset"
                )
                self._fail(rec, cls, _exc_text(e))
            except aiohttp.ClientPayloadError as e:
                self._fail(rec, "reset", _exc_text(e))
            except (aiohttp.ConnectionTimeoutError, aiohttp.ClientConnectorError) as e:
                self._fail(rec, "connect", _exc_text(e))
            except aiohttp.ClientError as e:
                self._fail(rec, "reset" if exchanged else "connect", _exc_text(e))
            except Exception as e:  # a bug or an unexpected library error: still one record
                self._fail(rec, "malformed_stream", f"unexpected {type(e).__name__}: {e}")
            wd.stop()
            self._finish(rec, t_send, reply)
            return reply
        raise AssertionError("unreachable")

    # --- response handling ---------------------------------------------------------

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
                    rec.retry_after_s = float(ra)
        elif status in (400, 413, 422) and _CONTEXT_PATTERNS.search(raw):
            cls = "context_exceeded"
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
    ) -> None:
        parser = SSEParser()
        content_parts: list[str] = []
        reasoning_parts: list[str] = []
        perf = time.perf_counter
        t_first: float | None = None
        t_last_tok = 0.0
        t_prev = 0.0
        max_gap = 0.0
        usage: dict[str, Any] | None = None
        read = resp.content.readany
        malformed = 0
        try:
            while True:
                chunk = await read()
                now = perf()
                wd.last = self.last_byte = now
                events = parser.feed(chunk) if chunk else parser.close()
                for data in events:
                    if data == b"[DONE]":
                        rec.saw_done = True
                        continue
                    try:
                        obj = orjson.loads(data)
                    except orjson.JSONDecodeError:
                        malformed += 1
                        continue
                    if not isinstance(obj, dict):
                        malformed += 1
                        continue
                    if t_first is not None:
                        gap = now - t_prev
                        if gap > max_gap:
                            max_gap = gap
                    t_prev = now
                    err = obj.get("error")
                    if err:
                        self._stream_error(rec, err)
                        continue
                    u = obj.get("usage")
                    if u:
                        usage = u
                    timings = obj.get("timings")
                    if timings:
                        rec.server_timings = timings
                    choices = obj.get("choices")
                    if not choices:
                        rec.chunks_empty += 1
                        continue
                    choice = choices[0]
                    delta = choice.get("delta") or {}
                    text = delta.get("content")
                    rtext = None
                    for name in _REASONING_FIELDS:
                        rtext = delta.get(name)
                        if rtext:
                            rec.reasoning_field = name
                            break
                    if text or rtext:
                        if t_first is None:
                            t_first = now
                            wd.first = True
                            rec.ttft_s = now - t_send
                            t_prev = now
                        t_last_tok = now
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
                    fr = choice.get("finish_reason")
                    if fr:
                        rec.finish_reason = fr
                if not chunk:
                    break
        finally:  # a stream that broke off keeps what it carried
            reply.content = "".join(content_parts)
            reply.reasoning = "".join(reasoning_parts)
            if t_first is not None:
                rec.max_gap_s = max_gap
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
        raw = await resp.read()
        wd.last = time.perf_counter()
        try:
            obj = orjson.loads(raw)
            message = obj["choices"][0].get("message") or {}
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError):
            self._fail(rec, "malformed_stream", "reply was neither SSE nor a chat completion")
            return
        reply.content = message.get("content") or ""
        for name in _REASONING_FIELDS:
            if message.get(name):
                reply.reasoning = message[name]
                rec.reasoning_field = name
                break
        rec.finish_reason = obj["choices"][0].get("finish_reason")
        rec.saw_done = True
        if reply.content or reply.reasoning:
            rec.ttft_s = time.perf_counter() - t_send
            rec.chunks_content = 1 if reply.content else 0
            rec.chunks_reasoning = 1 if reply.reasoning else 0
            if reply.content:
                rec.ttfc_s = rec.ttft_s
        self._apply_usage(rec, obj.get("usage"), reply)
        if obj.get("timings"):
            rec.server_timings = obj["timings"]

    def _apply_usage(self, rec: RequestRecord, usage: Any, reply: Reply) -> None:
        rec.content_chars = len(reply.content)
        rec.reasoning_chars = len(reply.reasoning)
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            rec.completion_tokens = usage["completion_tokens"]
            rec.tokens_source = "usage"
            if isinstance(usage.get("prompt_tokens"), int):
                rec.prompt_tokens = usage["prompt_tokens"]
                rec.prompt_source = "usage"
            details = usage.get("prompt_tokens_details") or {}
            if isinstance(details.get("cached_tokens"), int):
                rec.cached_tokens = details["cached_tokens"]
                rec.cache_source = "usage"
            cdetails = usage.get("completion_tokens_details") or {}
            if isinstance(cdetails.get("reasoning_tokens"), int):
                rec.reasoning_tokens = cdetails["reasoning_tokens"]
            else:
                rec.reasoning_tokens = rec.chunks_reasoning
        else:
            rec.completion_tokens = rec.chunks_content + rec.chunks_reasoning
            rec.reasoning_tokens = rec.chunks_reasoning
            rec.tokens_source = "chunks"
        t = rec.server_timings
        if t:
            if rec.cached_tokens is None and isinstance(t.get("cache_n"), int):
                rec.cached_tokens = t["cache_n"]
                rec.cache_source = "timings"
            if rec.prompt_tokens is None and isinstance(t.get("prompt_n"), int):
                rec.prompt_tokens = t["prompt_n"] + int(t.get("cache_n") or 0)
                rec.prompt_source = "timings"

    def _stream_error(self, rec: RequestRecord, err: Any) -> None:
        message = err.get("message") if isinstance(err, dict) else str(err)
        raw = orjson.dumps(err)
        cls: ErrorClass = "context_exceeded" if _CONTEXT_PATTERNS.search(raw) else "stream_error"
        self._fail(rec, cls, f"error in stream: {message}"[:500])

    @staticmethod
    def _fail(rec: RequestRecord, cls: ErrorClass, message: str) -> None:
        if rec.error_class is None or cls == "cancelled":
            rec.error_class = cls
            rec.error = message

    @staticmethod
    def _finish(rec: RequestRecord, t_send: float, reply: Reply) -> None:
        rec.e2e_s = time.perf_counter() - t_send
        rec.content_chars = len(reply.content)
        rec.reasoning_chars = len(reply.reasoning)
        if rec.tokens_source == "chunks" and not rec.completion_tokens:
            # a stream that failed part-way: count what arrived
            rec.completion_tokens = rec.chunks_content + rec.chunks_reasoning
            rec.reasoning_tokens = rec.chunks_reasoning
        classify(rec)


def classify(rec: RequestRecord) -> None:
    """Set ``outcome`` (and a diagnosis) from what the stream carried."""
    if rec.error_class is not None:
        rec.outcome = "error"
    elif rec.finish_reason is None:
        rec.outcome = "truncated"
        rec.diagnosis = "stream ended without a finish_reason" + (
            "" if rec.saw_done else " or [DONE]"
        )
    elif rec.content_chars == 0 and rec.reasoning_chars == 0:
        rec.outcome = "empty"
        if rec.finish_reason == "length":
            rec.diagnosis = "max_tokens reached before any text: raise request.max_tokens"
        else:
            rec.diagnosis = "HTTP 200 with no generated text"
    elif rec.content_chars == 0:
        rec.outcome = "reasoning_only"
        if rec.finish_reason == "length":
            rec.diagnosis = (
                "max_tokens was used up by reasoning: raise request.max_tokens "
                "(1,500-2,000 is the practical floor for thinking models)"
            )
        else:
            rec.diagnosis = "the model reasoned but wrote no answer"
    else:
        rec.outcome = "ok"


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
