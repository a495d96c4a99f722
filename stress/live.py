"""Bounded live state of a run, and the immutable snapshots the UI renders.

The engine pushes state changes and finished records here; the UI (headless printer now,
the TUI later) asks for a ``Snapshot`` a few times a second. Nothing here grows with the
run's length: per-user rows, fixed-size windows of recent values, running totals. The
exact numbers for the report come from the files on disk, not from here.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stress.events import RunEvent
from stress.record import OUTCOMES, RequestRecord

UserState = str  # starting, thinking, waiting, reasoning, streaming, done, error


@dataclass(slots=True)
class UserRow:
    user: int
    state: UserState = "starting"
    round: int = 0
    conversation: int = 1
    conversation_tokens: int = 0
    last_ttft_s: float | None = None
    last_decode_tok_s: float | None = None
    last_cached_pct: float | None = None
    last_retention: float | None = None
    ok: int = 0
    errors: int = 0
    empty: int = 0
    last_error: str | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    t: float
    phase: str
    users: tuple[UserRow, ...]
    outcomes: dict[str, int]
    error_classes: dict[str, int]
    in_flight: int
    rounds_done: int
    prompt_tokens: int
    completion_tokens: int
    ttft_p50_recent: float | None
    ttft_recent: tuple[float, ...]
    out_tok_s_recent: float
    cached_share_recent: float | None
    reconnects: int
    events: tuple[RunEvent, ...]
    collectors: dict[str, dict[str, Any]] = field(default_factory=dict)


class Live:
    WINDOW_S = 60.0

    def __init__(self, n_users: int) -> None:
        self.rows = [UserRow(user=u) for u in range(n_users)]
        self.phase = "starting"
        self.outcomes: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
        self.error_classes: dict[str, int] = {}
        self.in_flight = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.reconnects = 0
        self._ttft: deque[tuple[float, float]] = deque(maxlen=512)
        self._done: deque[tuple[float, int, int, int]] = deque(maxlen=4096)
        self.events: deque[RunEvent] = deque(maxlen=200)
        self.collectors: dict[str, Any] = {}

    def set_state(self, user: int, state: UserState) -> None:
        self.rows[user].state = state

    def on_send(self, user: int, round_: int, conversation: int, conv_tokens: int) -> None:
        row = self.rows[user]
        row.state, row.round, row.conversation = "waiting", round_, conversation
        row.conversation_tokens = conv_tokens
        self.in_flight += 1

    def on_record(self, rec: RequestRecord, t_end: float) -> None:
        self.in_flight -= 1
        row = self.rows[rec.user]
        self.outcomes[rec.outcome] += 1
        if rec.error_class:
            self.error_classes[rec.error_class] = self.error_classes.get(rec.error_class, 0) + 1
            row.errors += 1
            row.last_error = rec.error_class
        elif rec.outcome == "ok":
            row.ok += 1
        else:
            row.empty += 1
        self.reconnects += rec.reconnects
        prompt = rec.prompt_tokens or 0
        self.prompt_tokens += prompt
        self.completion_tokens += rec.completion_tokens
        if rec.ttft_s is not None:
            row.last_ttft_s = rec.ttft_s
            if not rec.warmup:
                self._ttft.append((t_end, rec.ttft_s))
        row.last_decode_tok_s = rec.decode_tok_s
        if rec.cached_tokens is not None and prompt:
            row.last_cached_pct = 100.0 * rec.cached_tokens / prompt
            row.last_retention = (
                rec.cached_tokens / rec.reusable_tokens if rec.reusable_tokens else None
            )
        self._done.append((t_end, rec.completion_tokens, prompt, rec.cached_tokens or 0))

    def on_event(self, ev: RunEvent) -> None:
        self.events.append(ev)

    def snapshot(self, t: float) -> Snapshot:
        cutoff = t - self.WINDOW_S
        recent_ttft = [v for (te, v) in self._ttft if te >= cutoff]
        done = [d for d in self._done if d[0] >= cutoff]
        span = min(self.WINDOW_S, t) or 1.0
        out_tok = sum(d[1] for d in done) / span
        prompt = sum(d[2] for d in done)
        cached = sum(d[3] for d in done)
        return Snapshot(
            t=t,
            phase=self.phase,
            users=tuple(
                UserRow(**{k: getattr(r, k) for k in UserRow.__slots__}) for r in self.rows
            ),
            outcomes=dict(self.outcomes),
            error_classes=dict(self.error_classes),
            in_flight=self.in_flight,
            rounds_done=sum(self.outcomes.values()),
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            ttft_p50_recent=float(np.median(recent_ttft)) if recent_ttft else None,
            ttft_recent=tuple(v for (_, v) in list(self._ttft)[-60:]),
            out_tok_s_recent=out_tok,
            cached_share_recent=(cached / prompt) if prompt else None,
            reconnects=self.reconnects,
            events=tuple(list(self.events)[-20:]),
            collectors={k: dict(v) for k, v in self.collectors.items()},
        )
