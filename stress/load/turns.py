"""The turn machinery every load model shares: the clock, stopping and draining, and what
becomes of a request once it ends (its count, its record, its events, its live state).

A load model (``stress.load.closed``, ``stress.load.arrivals``, ``stress.load.trace``)
decides who sends what and when; this module decides how a phase starts and ends and how
every request is recorded, so the three cannot drift apart on the promises the run makes:
every request ends in exactly one record, a stop starts no new turns, and a drain deadline
cancels what is still in flight, each cancelled request recorded with its cause.

Stopping has two steps, as the CLI promises: ``request_stop`` (duration over, Ctrl-C once,
a limit hit) starts no new turns and gives in-flight requests ``timeouts.drain`` to finish;
``cancel_in_flight`` (Ctrl-C twice, or the drain deadline) cancels them, and each cancelled
request is still recorded, as ``cancelled`` with its cause (``cancelled_by``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from stress.config.scenario import Limits, Scenario
from stress.core.events import RunEvent
from stress.core.record import CANCEL_CAUSES, CancelCause, RequestRecord
from stress.load.corpus import Corpus
from stress.load.replay import TraceRequest
from stress.net.client import ChatClient

START_BATCH = 500
"""Users started per turn of the event loop when many are due at once."""
START_SLACK_S = 0.005
"""A user due sooner than this is started now rather than after a sleep."""
RECORD_STEPS = {
    "record": "writing the request's record",
    "events": "writing the request's events (its record is written)",
    "live": "counting the request in the live state (its record and events are written)",
}
"""What a ``record_failed`` event says failed, by the step (its ``data.step``)."""
USER_STOPS = frozenset({"interrupted", "terminated"})
"""Stop reasons that are the user's (Ctrl-C, SIGTERM): a drain deadline after one of these
cancels requests the user chose to cut short, not requests the server failed to finish."""


@dataclass(slots=True)
class RunCounters:
    """Totals across the phases of a run, for the run-wide limits."""

    requests: int = 0
    errors: int = 0
    tokens: int = 0


class RecordSink(Protocol):
    """Where the engine's requests and events go: the run's ``Recorder``, or in a worker
    process the pipe to the parent's (``stress.runtime.worker``)."""

    def request_started(self, rec: RequestRecord) -> None: ...

    def write_request(
        self, rec: RequestRecord, token_times: array[float] | None = None
    ) -> None: ...

    def event(self, ev: RunEvent) -> None: ...


class LiveSink(Protocol):
    """The live state the engine updates: ``stress.live.state.Live``, or a worker's pipe."""

    phase: str
    open_loop: bool
    backlog: int

    def on_send(self, rec: RequestRecord) -> None: ...

    def on_record(self, rec: RequestRecord, t_end: float) -> None: ...

    def set_state(self, user: int, state: str, until: float | None = None) -> None: ...

    def on_arrival(self, t: float) -> None: ...

    def start_session(self, user: int) -> None: ...

    def end_session(self, user: int, admitted: bool = True) -> None: ...


@dataclass(slots=True)
class EngineResult:
    exit_reason: str
    requests: int


@dataclass(frozen=True, slots=True)
class LoadSetup:
    """What a load model is given: the phase's scenario, and the run's client, sinks and
    clock (the arguments of ``stress.load.engine.Engine``)."""

    scenario: Scenario
    client: ChatClient
    recorder: RecordSink
    live: LiveSink
    corpus: Corpus | None
    model: str
    run_nonce: str
    clock_t0: float
    paste_scale: float = 1.0
    """tiktoken tokens per server token, so paste budgets are in the server's tokens."""
    on_stop: Callable[[str], None] | None = None
    phase: str = "main"
    counters: RunCounters | None = None
    trace: list[TraceRequest] | None = None
    """The requests of ``scenario.replay``'s trace (stress.load.replay)."""
    shard: tuple[int, int] = (0, 1)
    """(k, n): this engine runs the users u with u % n == k (``stress.runtime.worker``)."""
    limits: bool = True
    """Apply ``scenario.limits`` here (False: the parent process applies them to the
    whole run's records, ``stress.runtime.pool``)."""
    time_scale: float = 1.0
    """The simulator's simulated seconds per wall second: ``scenario`` is already
    ``time_scaled`` by it (a replay's speed multiplied), so the events can say the
    scenario's own figures."""


def count_request(c: RunCounters, rec: RequestRecord, lim: Limits) -> str | None:
    """Add a finished request to the run's totals; the limit it crossed, if any."""
    c.requests += 1
    if rec.outcome == "error" and rec.error_class != "cancelled":
        c.errors += 1
    c.tokens += (rec.prompt_tokens or rec.prompt_tokens_est) + rec.completion_tokens
    if lim.max_total_tokens is not None and c.tokens >= lim.max_total_tokens:
        return "limit: max_total_tokens"
    if (
        lim.max_error_rate is not None
        and c.requests >= lim.min_requests
        and c.errors / c.requests > lim.max_error_rate
    ):
        return "limit: max_error_rate"
    return None


def shard_users(count: int, shard: tuple[int, int]) -> range:
    """The users of shard ``(k, n)``: user u runs in worker u % n (global ids kept)."""
    k, n = shard
    return range(k, count, n)


def request_id(nonce: str, user: int, rnd: int) -> str:
    """``X-Request-ID`` of a user's turn: unique in the run (the engine's nonce names the
    phase too) and across runs (the run nonce), readable in a server's log."""
    return f"{nonce}-u{user}-r{rnd}"


def build_body(
    scenario: Scenario,
    model: str,
    messages: list[dict[str, str]],
    max_tokens: int | None = None,
) -> bytes:
    req = scenario.request
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": req.max_tokens if max_tokens is None else max_tokens,
        "temperature": req.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if req.top_p is not None:
        body["top_p"] = req.top_p
    if req.reasoning != "auto":
        body["chat_template_kwargs"] = {"enable_thinking": req.reasoning == "on"}
    for key, value in req.extra_body.items():
        if isinstance(value, dict) and isinstance(body.get(key), dict):
            body[key] = {**body[key], **value}
        else:
            body[key] = value
    # a bytes of its own size: orjson's output buffer is rounded up (~16 KiB for a 1.5 KiB
    # body) and the body is held while its request is in flight (as in recorder._dumps_line)
    return bytes(memoryview(orjson.dumps(body)))


class LoadModel:
    """One phase of load under one load model. The phase runs in ``_run``: the model's
    ``_prepare`` (before the phase's clock starts), ``_begin`` (as it starts), ``_start``
    (the task that starts the users, sessions or requests, until done or a stop) and
    ``_after_start``; then the drain. The model's tasks append themselves to ``_tasks``
    and end each request with ``_finish``."""

    def __init__(self, setup: LoadSetup) -> None:
        scenario = setup.scenario
        self.sc = scenario
        self.shard = setup.shard
        self._limits = setup.limits
        self.client = setup.client
        self.recorder = setup.recorder
        self.live = setup.live
        self.corpus = setup.corpus
        self.model = setup.model
        self.phase = setup.phase
        # the phase is part of every marker: users of two phases never share cache
        self.nonce = setup.run_nonce if self.phase == "main" else f"{setup.run_nonce}-{self.phase}"
        self.t0 = setup.clock_t0
        self.paste_scale = setup.paste_scale
        self.stop_new = asyncio.Event()
        self.exit_reason = ""
        self._on_stop = setup.on_stop
        self._tasks: list[asyncio.Task[None]] = []
        self._starter: asyncio.Task[None] | None = None
        self._cancel_cause: CancelCause | None = None
        self.counters = setup.counters or RunCounters()
        self._requests = 0
        self._ended: list[tuple[RequestRecord, array[float] | None, float]] = []
        """Requests ended but not yet written (``_finish``): record, token
        times, run time at the end."""
        self._later_due = False
        """``_later`` is scheduled for the loop's next turn."""
        self._warm_rounds = scenario.warmup.rounds
        self._t_phase = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self.t0

    # --- what a load model decides -----------------------------------------------------

    async def _prepare(self) -> None:
        """Work before the phase's clock starts (nothing by default)."""

    def _warm(self) -> bool:
        """The phase opens in warm-up (the live view's state only)."""
        return bool(self._warm_rounds)

    def _begin(self, loop: asyncio.AbstractEventLoop) -> asyncio.TimerHandle | None:
        """As the phase's clock starts: a timer to cancel at the end, if any."""
        return None

    async def _start(self) -> None:
        """Start the users, sessions or requests (each a task in ``_tasks``) until all are
        started or the run stops starting turns (every load model has its own)."""
        raise NotImplementedError

    def _after_start(self) -> None:
        """Once ``_start`` has ended (all started, or a stop), before the drain."""

    # --- stopping ----------------------------------------------------------------------

    def request_stop(self, reason: str) -> None:
        if not self.stop_new.is_set():
            self.exit_reason = reason
            self.stop_new.set()
            self._show("draining")
            if self._on_stop is not None:
                self._on_stop(reason)

    def cancel_in_flight(self, cause: CancelCause = "interrupt") -> None:
        """Cancel the requests in flight, each recorded ``cancelled`` with the first cause
        given: "interrupt" for the user's second Ctrl-C or SIGTERM (every caller outside
        the engine), a drain deadline when the engine's own drain runs out."""
        self._cancel_cause = self._cancel_cause or cause
        if self._starter is not None:
            self._starter.cancel()
        for task in self._tasks:
            task.cancel()

    async def run(self, t_phase: float | None = None) -> EngineResult:
        """Run the phase; ``t_phase``: its start (perf time) when several processes share
        it, so every worker's ramp-up counts from the same instant."""
        try:
            return await self._run(t_phase)
        finally:  # however the phase ends, every ended request is written before it returns
            self._write_ended()

    async def _run(self, t_phase: float | None) -> EngineResult:
        sc = self.sc
        loop = asyncio.get_running_loop()
        await self._prepare()
        deadline = None
        if sc.duration is not None:
            deadline = loop.call_later(sc.duration, self.request_stop, "duration")
        self._show("warmup" if self._warm() else "running")
        self._t_phase = max(t_phase or 0.0, time.perf_counter())
        self._tasks = []
        timer = self._begin(loop)
        starter = self._starter = asyncio.create_task(self._start(), name="users-start")
        stop_wait = asyncio.ensure_future(self.stop_new.wait())
        await asyncio.wait([starter, stop_wait], return_when=asyncio.FIRST_COMPLETED)
        await asyncio.gather(starter, return_exceptions=True)  # returns at once on a stop
        self._after_start()
        await self._drain(stop_wait)
        stop_wait.cancel()
        if deadline is not None:
            deadline.cancel()
        if timer is not None:
            timer.cancel()
        if not self.exit_reason:
            self.exit_reason = "rounds" if sc.rounds is not None else "done"
        self._show("finished")
        return EngineResult(self.exit_reason, self._requests)

    async def _drain(self, stop_wait: asyncio.Future[Any]) -> None:
        """Wait for every task; after a stop, ``timeouts.drain`` at most, then cancel."""
        drain = self.sc.timeouts.drain
        all_done = asyncio.gather(*self._tasks, return_exceptions=True)
        waiters: list[asyncio.Future[Any]] = [all_done, stop_wait]
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        if not all_done.done():
            _, pending = await asyncio.wait(self._tasks, timeout=drain)
            if pending:
                self.recorder.event(
                    RunEvent(
                        self.now(),
                        "drain_timeout",
                        f"{len(pending)} request(s) still running after the "
                        f"{drain:g}s drain period: cancelled",
                        "warning",
                        data={"cause": self._drain_cause()},
                    )
                )
                self.cancel_in_flight(self._drain_cause())
        await all_done

    def _drain_cause(self) -> CancelCause:
        """Whose stop the drain deadline followed: the user's, or the run's own end."""
        return "interrupt_drain" if self.exit_reason in USER_STOPS else "drain_deadline"

    def _show(self, state: str) -> None:
        self.live.phase = state if self.phase == "main" else f"{self.phase}: {state}"

    async def _sleep_until(self, t_abs: float) -> bool:
        """Sleep until perf time ``t_abs``; False if a stop was requested meanwhile.

        The loop's timer may fire up to its clock resolution early; sleeping again for the
        rest keeps a turn from starting before it was due (a negative ``queue_s``)."""
        while (delay := t_abs - time.perf_counter()) > 0 and not self.stop_new.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop_new.wait(), timeout=delay)
        return not self.stop_new.is_set()

    # --- a request's end ---------------------------------------------------------------

    @staticmethod
    def _client_failed(rec: RequestRecord, e: Exception) -> None:
        """The client broke its promise (it raised): the record still tells."""
        rec.outcome, rec.error_class = "error", "client_error"
        rec.error = f"{type(e).__name__}: {e}"[:500]

    def _schedule_later(self) -> None:
        """Run ``_later`` when the loop next turns (once for all who ask in this turn)."""
        if not self._later_due:
            self._later_due = True
            asyncio.get_running_loop().call_soon(self._later)

    def _later(self) -> None:
        """What waits for the loop's next turn, after this turn's requests went out: the
        records of requests that ended ``ok`` (``_finish``)."""
        self._later_due = False
        self._write_ended()

    def _finish(
        self, rec: RequestRecord, token_times: array[float] | None = None, *, defer: bool = False
    ) -> None:
        """A request has ended: what it decides (its count, a limit's stop) now, and its
        record, events and live state, before any stop it causes.

        ``defer`` (a user's turns): an ``ok`` request that crossed no limit is written when
        the loop next turns. With no think time that is after the user's next request went
        out: the ~30 us of writing no longer sit between a reply's end and the next request
        (on a server that paces each stream from its request's arrival, that turnaround
        spread the streams' chunks over more wakes of both processes: docs/performance.md).
        Nothing is lost: the record stays in the recorder's in-flight set until written,
        and ``run`` (and a session's end) writes what is held. Any other request is written
        at once, so its events come before what follows from it."""
        if rec.error_class == "cancelled" and rec.cancelled_by is None and self._cancel_cause:
            rec.cancelled_by = self._cancel_cause
            rec.error = f"cancelled {CANCEL_CAUSES[self._cancel_cause]}"
        self._ended.append((rec, token_times, self.now()))
        self._requests += 1
        reason = count_request(self.counters, rec, self.sc.limits) if self._limits else None
        if defer and rec.outcome == "ok" and reason is None:
            self._schedule_later()
            return
        self._write_ended()
        if reason is not None:
            self.request_stop(reason)

    def _write_ended(self) -> None:
        """Write the ended requests ``_finish`` holds, in the order they ended.

        It often runs as a loop callback, where an exception would reach no user's task
        (asyncio would print it and the records after it would be dropped): a failure to
        write one request is a ``record_failed`` event, and the others are still written.
        A record that never reached the recorder is also counted as lost by the report
        (``records_lost``: sent against recorded)."""
        ended, self._ended = self._ended, []
        for rec, token_times, t_end in ended:
            step = "record"
            try:
                self.recorder.write_request(rec, token_times)
                step = "events"
                self._request_events(rec)
                step = "live"
                self.live.on_record(rec, t_end)
            except Exception as e:  # a bug of ours: said once per request, never a traceback
                self.recorder.event(
                    RunEvent(
                        self.now(),
                        "record_failed",
                        f"user {rec.user} round {rec.round}: stress failed {RECORD_STEPS[step]}"
                        f": {type(e).__name__}: {e}"[:500],
                        "error",
                        user=rec.user,
                        data={"round": rec.round, "request_id": rec.request_id, "step": step},
                    )
                )

    def _request_events(self, rec: RequestRecord) -> None:
        """One event per failed, empty or stalled request, for events.jsonl and the panel."""
        if rec.outcome == "ok":  # the common case: no event, nothing to format
            return
        who = f"user {rec.user} round {rec.round}"
        if self.phase != "main":
            who += f" ({self.phase})"
        now = self.now()
        stalled = rec.error_class in ("stall", "first_token_timeout")
        if rec.outcome == "error" and rec.error_class != "cancelled" and not stalled:
            status = f" (HTTP {rec.http_status})" if rec.http_status else ""
            self.recorder.event(
                RunEvent(
                    now,
                    "request_failed",
                    f"{who}: {rec.error_class}{status}: {rec.error or 'no detail'}"[:300],
                    "warning",
                    user=rec.user,
                    data={"error_class": rec.error_class, "http_status": rec.http_status},
                )
            )
        elif rec.outcome in ("empty", "reasoning_only"):
            what = "no content" if rec.outcome == "empty" else "reasoning but no answer"
            self.recorder.event(
                RunEvent(
                    now,
                    "empty_reply",
                    f"{who}: {what} (finish_reason {rec.finish_reason or 'none'})",
                    "warning",
                    user=rec.user,
                    data={"finish_reason": rec.finish_reason, "outcome": rec.outcome},
                )
            )
        if stalled:  # one event per stall: `stall` (an error), not also `request_failed`
            gap = f"; longest gap {rec.max_gap_s:.1f}s" if rec.max_gap_s is not None else ""
            what = (
                "no first token in time"
                if rec.error_class == "first_token_timeout"
                else ("stream went silent")
            )
            self.recorder.event(
                RunEvent(
                    now,
                    "stall",
                    f"{who}: {what} ({rec.error_class}{gap})",
                    "error",
                    user=rec.user,
                    data={"error_class": rec.error_class, "max_gap_s": rec.max_gap_s},
                )
            )
