"""The one record every request ends in (a line of ``requests.jsonl``).

Exactly one record per request sent: success or a classified failure, never nothing.
Times are seconds; ``t_*`` fields are seconds since the run started (perf_counter clock).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Outcome = Literal["ok", "empty", "reasoning_only", "truncated", "error"]
OUTCOMES: tuple[Outcome, ...] = ("ok", "empty", "reasoning_only", "truncated", "error")

ErrorClass = Literal[
    "connect",  # could not open a connection (refused, DNS, connect timeout)
    "reset",  # the connection broke after the request was under way
    "http_429",  # rate limited (retry_after_s kept)
    "http_4xx",
    "http_5xx",
    "context_exceeded",  # HTTP 400 because the prompt does not fit the server's context
    "first_token_timeout",  # no generated token within timeouts.first_token
    "stall",  # no bytes for timeouts.stall after the first token
    "total_timeout",  # the request outlived timeouts.total
    "malformed_stream",  # a chunk that is not valid JSON, an unreadable body, or an SSE
    # line or event larger than stress.net.sse.MAX_EVENT_BYTES
    "stream_error",  # the server sent an error object inside a 200 stream
    "cancelled",  # stopped by the user (Ctrl-C twice) or the run's drain deadline
    "redirect",  # HTTP 3xx: never followed (it could send the prompt, or the key, elsewhere)
    "protocol",  # the HTTP response could not be parsed, or an HTTP 200 that is not a chat
    # reply (a Content-Type other than text/event-stream or application/json, e.g. text/html)
    "client_error",  # an unexpected exception inside stress's own request path: still one
    # record, with the message, never blamed on the server
    "worker_died",  # the worker process running this request died (--workers): what the
    # server answered is unknown; stress's failure, never blamed on the server
]

CancelCause = Literal["drain_deadline", "interrupt_drain", "interrupt"]
CANCEL_CAUSES: dict[CancelCause, str] = {
    "drain_deadline": "at the drain deadline: still running timeouts.drain after the run "
    "stopped starting turns (its duration ended, or a limit)",
    "interrupt_drain": "at the drain deadline: still running timeouts.drain after a Ctrl-C "
    "or SIGTERM",
    "interrupt": "by a second Ctrl-C or SIGTERM",
}
"""Why a request was cancelled (its ``cancelled_by``), in the words the verdict uses."""


SCHEMA_VERSION = 1
"""The shape of a ``requests.jsonl`` line. Bump it when a field is renamed, removed or
changes meaning (adding a field does not need it); readers refuse lines newer than the
version they know (``stress.analysis.runfiles``) and read lines without one as version 0."""


@dataclass(slots=True)
class RequestRecord:
    user: int
    conversation: int
    round: int
    turn: int
    """Turn number within the conversation (1 = first)."""
    schema_version: int = SCHEMA_VERSION
    phase: str = "main"
    request_id: str | None = None
    """Sent as ``X-Request-ID``: ``<run nonce>[-<phase>]-u<user>-r<round>``, with ``-a<n>``
    when the request was re-sent on a fresh connection (attempt n); None for requests
    made outside the engine. docs/real-servers.md says how to find it in a server's log."""
    response_id: str | None = None
    """The ``id`` of the server's reply chunks (vLLM: ``chatcmpl-<request_id>``; SGLang: its
    own request id, the ``rid`` of its request log; llama.cpp: random), or None."""
    warmup: bool = False
    t_sched: float = 0.0
    t_start: float = 0.0
    t_last_byte: float | None = None
    """When bytes of this request's reply last arrived (run clock, like ``t_start``); the
    live view reads it from the in-flight record to show how long a stream has been silent."""
    queue_s: float = 0.0
    ttft_s: float | None = None
    ttfc_s: float | None = None
    e2e_s: float | None = None
    decode_tok_s: float | None = None
    prompt_tokens: int | None = None
    prompt_tokens_est: int = 0
    prompt_source: str = "estimate"
    cached_tokens: int | None = None
    cache_source: str | None = None
    reusable_tokens: int = 0
    completion_tokens: int = 0
    tokens_source: str = "chunks"
    reasoning_tokens: int = 0
    content_chars: int = 0
    reasoning_chars: int = 0
    chunks_content: int = 0
    chunks_reasoning: int = 0
    chunks_empty: int = 0
    reasoning_field: str | None = None
    max_gap_s: float | None = None
    finish_reason: str | None = None
    saw_done: bool = False
    streamed: bool = True
    outcome: Outcome = "ok"
    error_class: ErrorClass | None = None
    error: str | None = None
    cancelled_by: CancelCause | None = None
    """Why a ``cancelled`` request was cancelled (``CANCEL_CAUSES``); None otherwise."""
    http_status: int | None = None
    retry_after_s: float | None = None
    reconnects: int = 0
    diagnosis: str | None = None
    conversation_tokens: int = 0
    paste_tokens: int = 0
    server_timings: dict[str, Any] | None = None
    prefilled_tokens: int = 0
    """Tokens of pre-built history (``conversation.start_tokens``) this request sends for
    the first time, in the server's tokens (estimated); 0 when the history was grown."""
