"""The typed read model of a run directory's lines: what every reader gets.

``requests.jsonl`` lines are written from :class:`stress.core.record.RequestRecord`; readers get
them back as :class:`RequestRow`, a ``TypedDict`` with the same fields (a test holds the
two equal), so mypy rejects a reader that asks for a field that does not exist or was
renamed, where ``dict[str, Any]`` let it break silently. Rows stay plain dicts at run
time: a 200k-request report pays nothing for the types.

Every field is optional here (``total=False``): a line from an older version of stress
lacks the fields added since, and :mod:`stress.analysis.runfiles` removes impossible
values before anyone reads them. ``schema_version`` says which shape a line has (absent:
written before versioning, read as version 0); a line newer than ``SCHEMA_VERSION`` is
refused with one line, never misread.
"""

from __future__ import annotations

from typing import Any, TypedDict

from stress.core.record import CancelCause, ErrorClass, Outcome


class RequestRow(TypedDict, total=False):
    """One line of ``requests.jsonl`` as read (fields: ``stress.core.record.RequestRecord``)."""

    schema_version: int
    user: int
    conversation: int
    round: int
    turn: int
    phase: str
    request_id: str | None
    response_id: str | None
    warmup: bool
    t_sched: float
    t_start: float
    t_last_byte: float | None
    queue_s: float
    ttft_s: float | None
    ttfc_s: float | None
    e2e_s: float | None
    decode_tok_s: float | None
    prompt_tokens: int | None
    prompt_tokens_est: int
    prompt_source: str
    cached_tokens: int | None
    cache_source: str | None
    reusable_tokens: int
    completion_tokens: int
    tokens_source: str
    reasoning_tokens: int
    content_chars: int
    reasoning_chars: int
    chunks_content: int
    chunks_reasoning: int
    chunks_empty: int
    reasoning_field: str | None
    max_gap_s: float | None
    finish_reason: str | None
    saw_done: bool
    streamed: bool
    outcome: Outcome
    error_class: ErrorClass | None
    error: str | None
    cancelled_by: CancelCause | None
    http_status: int | None
    retry_after_s: float | None
    reconnects: int
    diagnosis: str | None
    conversation_tokens: int
    paste_tokens: int
    server_timings: dict[str, Any] | None
    prefilled_tokens: int
    unserializable: list[str]
    """Written by the recorder when a value could not be serialised (set to null)."""


class EventRow(TypedDict, total=False):
    """One line of ``events.jsonl`` as read (fields: ``stress.core.events.RunEvent``)."""

    t: float
    kind: str
    message: str
    severity: str
    source: str
    user: int | None
    data: dict[str, Any]
