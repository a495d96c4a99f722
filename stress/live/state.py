"""Bounded live state of a run, and the immutable snapshots the UI renders.

The engine pushes state changes and finished records here; the UI (headless printer or
TUI) asks for a ``Snapshot`` a few times a second. Nothing here grows with the run's
length: per-user rows, fixed-size windows of recent values, running totals. The exact
numbers for the report come from the files on disk, not from here.

The in-flight request of each user is read, not copied, at snapshot time: the client
updates its record's chunk counters and ``t_last_byte`` in place, so the live state of a
stream (waiting for the first token and for how long, reasoning, streaming content, silent
since the last byte, current tok/s) costs nothing per chunk: the ages are computed here,
once per snapshot, from the record's timestamps.

One clock: a time-scaled simulator run (``time_scale`` simulated seconds per wall second)
is shown in simulated seconds, like ``summary.json`` and the report. The engine, the
records and the events are on the wall clock; the conversion is made here, once, with the
report's own helpers (times multiplied, per-time rates divided), and the snapshot says so
(``clock_label``). The recent windows and sparkline buckets stay wall-clock spans, so the
view is as smooth at any scale.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from itertools import islice
from typing import Any

from stress.analysis import figures
from stress.analysis.runfiles import rescale_sample, sim_rate, sim_seconds
from stress.core.events import QUIET_EVENT_KINDS, RunEvent
from stress.core.record import OUTCOMES, RequestRecord

UserState = str
"""starting, thinking, waiting (for the first token), reasoning, streaming, done."""
RECENT_TURNS = 10
SILENT_AFTER_S = 2.0
"""A stream with no byte for this long is shown as silent (normal gaps are milliseconds)."""
STALL_CLASSES = frozenset({"stall", "first_token_timeout"})
"""Error classes counted as stalls per user (the same requests get a ``stall`` event)."""
REQUEST_EVENT_KINDS = frozenset({"request_failed", "empty_reply", "stall"})
"""Per-request events: one per bad request, so a flood is possible; the UIs rate-limit them."""
RUN_FAILURE_KINDS = frozenset(
    {"recorder_failed", "record_failed", "collector_failed", "user_crashed", "worker_died"}
)
"""Run-level failures: always shown at once, never rate-limited."""


@dataclass(frozen=True, slots=True)
class TurnSummary:
    """One finished turn, for the per-user detail view."""

    round: int
    conversation: int
    t_end: float
    outcome: str
    error_class: str | None
    prompt_tokens: int | None
    cached_tokens: int | None
    completion_tokens: int
    ttft_s: float | None
    decode_tok_s: float | None
    e2e_s: float | None
    max_gap_s: float | None = None
    """The longest silence between chunks after the first token."""
    request_id: str | None = None
    """The ``X-Request-ID`` it was sent with (to find it in the server's log)."""


@dataclass(frozen=True, slots=True)
class UserRow:
    user: int
    state: UserState
    round: int
    conversation: int
    conversation_tokens: int
    last_ttft_s: float | None
    live_tok_s: float | None
    """Tokens per second of the stream in flight (chunks since the first token)."""
    last_decode_tok_s: float | None
    last_cached_pct: float | None
    last_retention: float | None
    ok: int
    errors: int
    empty: int
    last_error: str | None
    recent: tuple[TurnSummary, ...]
    first_token_wait_s: float | None = None
    """In flight, no token yet: seconds since the request was sent."""
    silent_s: float | None = None
    """In flight, after the first token: seconds since the last byte on the stream."""
    think_left_s: float | None = None
    """Thinking: seconds until the next turn is sent (when the engine said)."""
    stalls: int = 0
    """Requests of this user that ended in a stall or a first-token timeout."""
    last_request_id: str | None = None
    """``X-Request-ID`` of the user's last request: the one in flight, else the last sent."""


@dataclass(slots=True)
class _UserState:
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
    stalls: int = 0
    think_until: float | None = None
    last_request_id: str | None = None
    in_flight: RequestRecord | None = None
    recent: tuple[TurnSummary, ...] = ()
    """The last ``RECENT_TURNS`` turns, oldest first: a new tuple only when a turn ends, so
    a snapshot shares it and the live view's process is sent it only when it changed."""

    def row(self, now: float, scale: float) -> UserRow:
        """The row at wall time ``now``, on the simulated clock when ``scale`` is not 1."""
        state, live_tok_s = self.state, None
        waited = silent = think_left = None
        rec = self.in_flight
        request_id = self.last_request_id
        if rec is not None:
            request_id = rec.request_id  # read now: a re-send renames it
            if rec.ttft_s is None:
                state = "waiting"
                waited = sim_seconds(max(0.0, now - rec.t_start), scale)
            else:
                state = "streaming" if rec.chunks_content else "reasoning"
                t_first = rec.t_start + rec.ttft_s
                elapsed = now - t_first
                n = rec.chunks_content + rec.chunks_reasoning - 1
                if elapsed > 0.05 and n > 0:
                    live_tok_s = sim_rate(n / elapsed, scale)
                if rec.t_last_byte is not None:
                    silent = sim_seconds(max(0.0, now - max(t_first, rec.t_last_byte)), scale)
        elif state == "thinking" and self.think_until is not None:
            think_left = sim_seconds(max(0.0, self.think_until - now), scale)
        return UserRow(
            self.user,
            state,
            self.round,
            self.conversation,
            self.conversation_tokens,
            self.last_ttft_s,
            live_tok_s,
            self.last_decode_tok_s,
            self.last_cached_pct,
            self.last_retention,
            self.ok,
            self.errors,
            self.empty,
            self.last_error,
            self.recent,
            waited,
            silent,
            think_left,
            self.stalls,
            request_id,
        )


@dataclass(frozen=True, slots=True)
class Snapshot:
    t: float
    """Seconds since the run started (simulated seconds in a time-scaled run)."""
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
    out_tok_s_history: tuple[float, ...]
    """Aggregate output tok/s per complete 5 s bucket, oldest first (for sparklines). The
    bucket still filling is left out: divided by the whole 5 s it read low, and 0 in its
    first moments, as the sparkline's latest value, while every stream was generating."""
    cached_share_recent: float | None
    working_set_tokens: int
    """Sum of the users' live conversation lengths: what the KV pool would need to hold."""
    reconnects: int
    events: tuple[RunEvent, ...]
    collectors: dict[str, dict[str, Any]] = field(default_factory=dict)
    output_tokens: int = 0
    """Completion tokens of non-warm-up requests (``stress.analysis.figures.output_tokens``);
    ``completion_tokens`` counts warm-up too (the GPU energy's denominator)."""
    cache_retention: float | None = None
    """Run-level cache retention of non-warm-up requests (``stress.analysis.figures.retention``)."""
    time_scale: float = 1.0
    """Simulated seconds per wall second: every time and rate here is on the simulated clock
    of a time-scaled simulator run (1: not scaled, the wall clock)."""
    ttft_p95_run: float | None = None
    """The headline TTFT p95 so far (``figures.ttft_p95``'s population and formula): the
    live badge grades the SLO on it, as the verdict will at the end."""
    ttft_n: int = 0
    decode_p50_run: float | None = None
    """The headline decode p50 so far (``figures.decode_p50``)."""
    decode_n: int = 0
    open_loop: bool = False
    """Open-loop sessions (``arrivals``): ``users`` holds the active sessions only."""
    arrivals: int = 0
    """Sessions arrived so far (every phase)."""
    arrivals_per_min_recent: float | None = None
    """Arrivals per minute over the last minute (simulated minutes in a scaled run)."""
    sessions_active: int = 0
    sessions_done: int = 0
    """Sessions that left after being admitted (finished their rounds or were stopped)."""
    backlog: int = 0
    """Arrived sessions waiting for a slot (``arrivals.max_concurrent``)."""
    workers: dict[int, dict[str, Any]] = field(default_factory=dict)
    """``--workers``: each worker process's latest health (pid, loop lag, CPU, RSS; ``dead``
    once it died), by worker number; empty in a one-process run."""
    users_first: int = 0
    """The position of ``users[0]`` among the run's users (a window of them, below)."""
    users_total: int | None = None
    """The run's users when ``users`` holds only a window of them (the rows the live view
    shows: ``Live.snapshot``'s ``rows``); None when it holds them all."""

    @property
    def clock_label(self) -> str:
        """``simulated time x60`` in a time-scaled run; empty otherwise (nothing to say)."""
        return f"simulated time x{self.time_scale:g}" if self.time_scale != 1.0 else ""

    @property
    def cancelled(self) -> int:
        """Requests cancelled so far (a drain deadline, Ctrl-C twice): counted apart from
        errors, as the verdict counts them (``stress.analysis.judge.tally``)."""
        return self.error_classes.get("cancelled", 0)

    @property
    def errors(self) -> int:
        """Failed requests so far, cancelled ones aside."""
        return self.outcomes.get("error", 0) - self.cancelled


def _add(buckets: deque[list[int]], key: int, values: tuple[int, ...]) -> None:
    """Add ``values`` to the bucket ``key`` ([key, *sums]), else start one. The workers'
    records (``--workers``) come a little out of order, so the bucket is looked for among
    the last few: a boundary crossed back and forth stays one bucket."""
    for bucket in islice(reversed(buckets), 4):
        if bucket[0] == key:
            for i, v in enumerate(values, 1):
                bucket[i] += v
            return
    buckets.append([key, *values])


class Live:
    WINDOW_S = 60.0
    BUCKET_S = 5.0
    HISTORY = 120

    def __init__(self, n_users: int, time_scale: float = 1.0) -> None:
        self._users: dict[int, _UserState] = {u: _UserState(user=u) for u in range(n_users)}
        """Closed loop: every user. Open loop: the active sessions only (a finished one
        drops out, so an hour of arrivals keeps only its live sessions here)."""
        self.open_loop = False
        self.arrivals = 0
        self.sessions_done = 0
        self.backlog = 0
        self._arrival_times: deque[float] = deque(maxlen=4096)
        self.time_scale = time_scale
        """Simulated seconds per wall second (``Target.time_scale``; 1: not scaled)."""
        self.phase = "starting"
        self.outcomes: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
        self.error_classes: dict[str, int] = {}
        self.in_flight = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.output_tokens = 0
        self.reconnects = 0
        self._retention = figures.RetentionTally()
        self._slo_ttft = figures.RunningPercentile(95)
        self._slo_decode = figures.RunningPercentile(50)
        """Every headline TTFT and decode speed so far (~32 bytes each): the SLO's figures
        are exact percentiles, as in summary.json."""
        self._ttft: deque[tuple[float, float]] = deque(maxlen=512)
        self._window: deque[list[int]] = deque(maxlen=int(self.WINDOW_S) + 2)
        """Per wall second of the recent window: [second, completion, prompt, cached tokens]
        of the requests that ended in it. A snapshot sums ~60 of these, however many
        requests ended (a list of every request held only the last 4,096, which at 2,000
        streams was a few seconds of the window, divided by all 60)."""
        self._buckets: deque[list[int]] = deque(maxlen=self.HISTORY)
        self.events: deque[RunEvent] = deque(maxlen=200)
        self.collectors: dict[str, Any] = {}
        self.workers: dict[int, dict[str, Any]] = {}
        """Worker processes' health (``stress.runtime.pool``), by worker number."""

    def _user(self, user: int) -> _UserState:
        u = self._users.get(user)
        if u is None:
            u = self._users[user] = _UserState(user=user)
        return u

    def set_state(self, user: int, state: UserState, until: float | None = None) -> None:
        """``until``: for ``thinking``, the run time the next turn is due (shown as time left)."""
        u = self._user(user)
        u.state = state
        u.think_until = until

    def on_arrival(self, t: float) -> None:
        """A session arrived at run time ``t`` (wall seconds)."""
        self.arrivals += 1
        self._arrival_times.append(t)

    def start_session(self, user: int) -> None:
        self._user(user)

    def end_session(self, user: int, admitted: bool = True) -> None:
        """A session left (or, ``admitted`` False, never got a slot): its row drops out."""
        self._users.pop(user, None)
        if admitted:
            self.sessions_done += 1

    def on_send(self, rec: RequestRecord) -> None:
        u = self._user(rec.user)
        u.round, u.conversation = rec.round, rec.conversation
        u.conversation_tokens = rec.conversation_tokens
        u.in_flight = rec
        u.state = "waiting"
        u.think_until = None
        self.in_flight += 1

    def on_record(self, rec: RequestRecord, t_end: float) -> None:
        self.in_flight -= 1
        u = self._user(rec.user)
        if u.in_flight is rec:  # else the user's next request is already out
            u.in_flight = None
        u.last_request_id = rec.request_id
        self.outcomes[rec.outcome] += 1
        if rec.error_class:
            self.error_classes[rec.error_class] = self.error_classes.get(rec.error_class, 0) + 1
            u.errors += 1
            u.last_error = rec.error_class
            if rec.error_class in STALL_CLASSES:
                u.stalls += 1
        elif rec.outcome == "ok":
            u.ok += 1
        else:
            u.empty += 1
        self.reconnects += rec.reconnects
        prompt = rec.prompt_tokens or 0
        self.prompt_tokens += prompt
        self.completion_tokens += rec.completion_tokens
        scale = self.time_scale
        ttft, decode = sim_seconds(rec.ttft_s, scale), sim_rate(rec.decode_tok_s, scale)
        if ttft is not None:
            u.last_ttft_s = ttft
            if not rec.warmup:
                self._ttft.append((t_end, ttft))
        u.last_decode_tok_s = decode
        if not rec.warmup:
            self.output_tokens += rec.completion_tokens
            if rec.outcome in figures.GENERATED:  # the headline population
                if ttft is not None:
                    self._slo_ttft.add(ttft)
                if decode is not None:
                    self._slo_decode.add(decode)
        if rec.cached_tokens is not None and prompt:
            u.last_cached_pct = 100.0 * rec.cached_tokens / prompt
            u.last_retention = figures.retention([(rec.cached_tokens, rec.reusable_tokens)])
        if rec.cached_tokens is not None and rec.reusable_tokens and not rec.warmup:
            self._retention.add(rec.cached_tokens, rec.reusable_tokens)
        turn = TurnSummary(
            rec.round,
            rec.conversation,
            sim_seconds(t_end, scale),
            rec.outcome,
            rec.error_class,
            rec.prompt_tokens,
            rec.cached_tokens,
            rec.completion_tokens,
            ttft,
            decode,
            sim_seconds(rec.e2e_s, scale),
            sim_seconds(rec.max_gap_s, scale),
            rec.request_id,
        )
        u.recent = (*u.recent[max(0, len(u.recent) + 1 - RECENT_TURNS) :], turn)
        known = rec.cached_tokens is not None  # live_cached_share's population
        cached, judged = (rec.cached_tokens or 0, prompt) if known else (0, 0)
        _add(self._window, int(t_end), (rec.completion_tokens, judged, cached))
        _add(self._buckets, int(t_end // self.BUCKET_S), (rec.completion_tokens,))

    def on_event(self, ev: RunEvent) -> None:
        if ev.kind in QUIET_EVENT_KINDS:
            return
        if self.time_scale != 1.0:  # a copy: the recorder writes the event as it came
            ev = replace(ev, t=sim_seconds(ev.t, self.time_scale))
        self.events.append(ev)

    def snapshot(self, t: float, rows: tuple[int, int] | None = None) -> Snapshot:
        """The state at ``t``, the run clock's seconds (wall), shown on the run's one clock.

        ``rows`` (first, count): only those users' rows, by position (the ones the live
        view shows: at 2,000 users every row was ~5 ms of the run's loop a tick, and their
        pickle more); the figures are still the whole run's."""
        scale = self.time_scale
        cutoff = t - self.WINDOW_S
        recent_ttft = [v for (te, v) in self._ttft if te >= cutoff]
        first = max(0, math.ceil(cutoff))  # whole seconds in the window: [first, t]
        span = (t - first) or 1.0
        out = prompt = cached = 0
        for sec, c, p, k in self._window:
            if sec >= first:
                out += c
                prompt += p
                cached += k
        first, total = 0, None
        users: Iterable[_UserState] = self._users.values()
        if rows is not None:
            total = len(self._users)
            first = min(max(rows[0], 0), total)
            users = islice(users, first, first + max(rows[1], 0))
        shown = tuple(u.row(t, scale) for u in users)
        arrival_rate = None
        if self.open_loop:
            recent = sum(1 for a in self._arrival_times if a >= cutoff)
            arrival_rate = sim_rate(60.0 * recent / (min(self.WINDOW_S, t) or 1.0), scale)
        history: list[float] = []
        if self._buckets:  # the complete buckets: [oldest, current)
            oldest, current = min(b[0] for b in self._buckets), int(t // self.BUCKET_S)
            by_bucket: dict[int, int] = {}
            for b, n in self._buckets:
                by_bucket[b] = by_bucket.get(b, 0) + n
            history = [
                sim_rate(by_bucket.get(b, 0) / self.BUCKET_S, scale) for b in range(oldest, current)
            ]
        collectors = {k: dict(v) for k, v in self.collectors.items()}
        if scale != 1.0 and collectors.get("server"):
            collectors["server"] = rescale_sample(collectors["server"], scale)
        return Snapshot(
            t=sim_seconds(t, scale),
            phase=self.phase,
            users=shown,
            outcomes=dict(self.outcomes),
            error_classes=dict(self.error_classes),
            in_flight=self.in_flight,
            rounds_done=sum(self.outcomes.values()),
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            ttft_p50_recent=figures.live_ttft_p50(recent_ttft),
            ttft_recent=tuple(v for (_, v) in list(self._ttft)[-60:]),
            out_tok_s_recent=sim_rate(figures.live_output_tok_s(out, span), scale),
            out_tok_s_history=tuple(history[-self.HISTORY :]),
            cached_share_recent=figures.live_cached_share(cached, prompt),
            working_set_tokens=sum(u.conversation_tokens for u in self._users.values()),
            reconnects=self.reconnects,
            events=tuple(list(self.events)[-50:]),
            collectors=collectors,
            output_tokens=self.output_tokens,
            cache_retention=self._retention.value,
            time_scale=scale,
            ttft_p95_run=self._slo_ttft.value(),
            ttft_n=len(self._slo_ttft),
            decode_p50_run=self._slo_decode.value(),
            decode_n=len(self._slo_decode),
            open_loop=self.open_loop,
            arrivals=self.arrivals,
            arrivals_per_min_recent=arrival_rate,
            sessions_active=len(self._users) if self.open_loop else 0,
            sessions_done=self.sessions_done,
            backlog=self.backlog,
            workers={k: dict(v) for k, v in self.workers.items()},
            users_first=first,
            users_total=total,
        )
