"""Simulated users: ramp-up, turns, think time, limits, and a clean stop.

One asyncio task per user. A user's turn is scheduled at an absolute time (ramp-up offset,
then previous reply + think time); the record keeps both that time and the real send time,
so client-side queueing or event-loop lag is visible rather than hidden in the latency.

Stopping has two steps, as the CLI promises: ``request_stop`` (duration over, Ctrl-C once,
a limit hit) starts no new turns and gives in-flight requests ``timeouts.drain`` to finish;
``cancel_in_flight`` (Ctrl-C twice, or the drain deadline) cancels them, and each cancelled
request is still recorded, as ``cancelled`` with its cause (``cancelled_by``).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from stress.config.scenario import MAX_USERS, Arrivals, Limits, Scenario, ThinkTime
from stress.core.events import RunEvent
from stress.core.record import CANCEL_CAUSES, CancelCause, RequestRecord
from stress.core.tokens import count_tokens
from stress.load.conversation import MESSAGE_OVERHEAD, Conversation, History, build_history
from stress.load.corpus import Corpus, Excerpt
from stress.load.replay import PromptBuilder, TraceRequest, implied_reuse
from stress.net.client import ChatClient
from stress.net.reply import Reply

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


@dataclass(slots=True)
class _Ahead:
    """The parts of a user's next turn that its reply does not decide, prepared after this
    turn's requests went out, while the reply streams (``Engine._prepare_ahead``): the
    turnaround from a reply's end to the next request then holds only what the reply
    decides. Taken or, when not ready, made on the spot; either way the same."""

    user: int
    rng: random.Random
    """The user's paste draws, a stream of their own: the k-th paste is the same whether
    it was drawn ahead or on the spot."""
    paste: Excerpt | None = None
    conversation: Conversation | None = None
    want_paste: bool = False
    """The next turn pastes whatever the reply (``paste_on: every``)."""
    next_index: int = 0
    """The index of the conversation a rollover would open next."""


@dataclass(slots=True)
class EngineResult:
    exit_reason: str
    requests: int


def think_seconds(rng: random.Random, spec: ThinkTime) -> float:
    if spec.distribution == "constant":
        return spec.mean if spec.mean is not None else spec.min
    if spec.distribution == "exponential":
        value = rng.expovariate(1.0 / spec.mean) if spec.mean else 0.0
        return min(max(value, spec.min), spec.max) if spec.max > 0 else max(value, spec.min)
    return rng.uniform(spec.min, spec.max)


def arrival_gap(rng: random.Random, spec: Arrivals, rate: float | None = None) -> float:
    """Seconds to the next arrival at ``rate`` per minute (default ``spec.rate``):
    exponential (Poisson), or gamma with the same mean and a coefficient of variation of
    ``burstiness`` (shape 1/burstiness^2)."""
    mean = 60.0 / (rate or spec.rate)
    if spec.process == "gamma":
        shape = 1.0 / spec.burstiness**2
        return rng.gammavariate(shape, mean / shape)
    return rng.expovariate(1.0 / mean)


def session_rounds(seed: int, session: int, spec: Arrivals) -> int:
    """Rounds of one session, from its own seed (the same on every run with the seed)."""
    return random.Random(f"{seed}:{session}:rounds").randint(*spec.rounds)


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


class Engine:
    def __init__(
        self,
        scenario: Scenario,
        client: ChatClient,
        recorder: RecordSink,
        live: LiveSink,
        corpus: Corpus | None,
        model: str,
        run_nonce: str,
        clock_t0: float,
        paste_scale: float = 1.0,
        on_stop: Callable[[str], None] | None = None,
        phase: str = "main",
        counters: RunCounters | None = None,
        trace: list[TraceRequest] | None = None,
        shard: tuple[int, int] = (0, 1),
        limits: bool = True,
    ) -> None:
        self.sc = scenario
        self.shard = shard
        """(k, n): this engine runs the users u with u % n == k (``stress.runtime.worker``)."""
        self._users = shard_users(scenario.users.count, shard)
        self._limits = limits
        """Apply ``scenario.limits`` here (False: the parent process applies them to the
        whole run's records, ``stress.runtime.pool``)."""
        self.trace = trace or []
        """The requests of ``scenario.replay``'s trace (stress.load.replay)."""
        self.client = client
        self.recorder = recorder
        self.live = live
        self.corpus = corpus
        self.model = model
        self.phase = phase
        # the phase is part of every marker: users of two phases never share cache
        self.nonce = run_nonce if phase == "main" else f"{run_nonce}-{phase}"
        self.t0 = clock_t0
        self.paste_scale = paste_scale
        """tiktoken tokens per server token, so paste budgets are in the server's tokens."""
        self.stop_new = asyncio.Event()
        self.exit_reason = ""
        self._on_stop = on_stop
        self._tasks: list[asyncio.Task[None]] = []
        self._starter: asyncio.Task[None] | None = None
        self._cancel_cause: CancelCause | None = None
        self.counters = counters or RunCounters()
        self._requests = 0
        self._ended: list[tuple[RequestRecord, array[float] | None, float]] = []
        """Requests ended but not yet written (``_finish``): record, token
        times, run time at the end."""
        self._ahead: list[_Ahead] = []
        """Users whose next turn is to be prepared when the loop next turns."""
        self._later_due = False
        """``_later`` is scheduled for the loop's next turn."""
        self._past_warmup = 0
        self._warm_rounds = scenario.warmup.rounds
        self._histories: dict[int, History] = {}
        """Pre-built history of each user's first conversation (taken when it starts)."""
        self._ask_tokens: dict[str, int] = {}
        """Tokens of each question the scenario asks (its ``ask:`` list), counted once."""
        self._t_phase = time.perf_counter()
        # open-loop sessions (``arrivals``): user ids are sessions, allocated on arrival
        self._backlog: deque[tuple[int, float]] = deque()
        """Sessions waiting for a slot under ``max_concurrent``: (session, arrival perf time)."""
        self._active = 0
        self._arrived = 0
        self._sessions: dict[int, tuple[float, float, int]] = {}
        """Active sessions: arrival and admission perf times, rounds drawn."""

    def now(self) -> float:
        return time.perf_counter() - self.t0

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
        await self._build_histories()
        deadline = None
        if sc.duration is not None:
            deadline = loop.call_later(sc.duration, self.request_stop, "duration")
        arrivals = sc.arrivals
        warm = self._warm_rounds or (arrivals is not None and arrivals.warmup > 0)
        self._show("warmup" if warm else "running")
        self._t_phase = max(t_phase or 0.0, time.perf_counter())
        self._tasks = []
        warm_end = None
        if arrivals is not None and arrivals.warmup > 0:
            warm_end = loop.call_later(arrivals.warmup, self._warmup_over)
        if sc.replay is not None:
            self._show("running")
            start = self._replay()
        else:
            start = self._arrive() if arrivals is not None else self._start_users()
        starter = self._starter = asyncio.create_task(start, name="users-start")
        stop_wait = asyncio.ensure_future(self.stop_new.wait())
        await asyncio.wait([starter, stop_wait], return_when=asyncio.FIRST_COMPLETED)
        await asyncio.gather(starter, return_exceptions=True)  # returns at once on a stop
        if sc.replay is not None:
            pass
        elif arrivals is None:
            for u in self._users[len(self._tasks) :]:  # stopped before their turn came
                self.live.set_state(u, "done")
        else:
            self._drop_backlog()
        all_done = asyncio.gather(*self._tasks, return_exceptions=True)
        waiters: list[asyncio.Future[Any]] = [all_done, stop_wait]
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        if not all_done.done():
            _, pending = await asyncio.wait(self._tasks, timeout=sc.timeouts.drain)
            if pending:
                self.recorder.event(
                    RunEvent(
                        self.now(),
                        "drain_timeout",
                        f"{len(pending)} request(s) still running after the "
                        f"{sc.timeouts.drain:g}s drain period: cancelled",
                        "warning",
                        data={"cause": self._drain_cause()},
                    )
                )
                self.cancel_in_flight(self._drain_cause())
        await all_done
        stop_wait.cancel()
        if deadline is not None:
            deadline.cancel()
        if warm_end is not None:
            warm_end.cancel()
        if not self.exit_reason:
            self.exit_reason = "rounds" if sc.rounds is not None else "done"
        self._show("finished")
        return EngineResult(self.exit_reason, self._requests)

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

    async def _start_users(self) -> None:
        """Start each user's task when its ramp-up offset comes, in batches that yield to
        the loop: ten thousand users never hold the loop (or Ctrl-C) for long."""
        users = self._users
        for i, u in enumerate(users):
            if self.stop_new.is_set():
                return
            if self._ramp_time(u) - time.perf_counter() > START_SLACK_S:
                if not await self._sleep_until(self._ramp_time(u)):
                    return
            elif i % START_BATCH == START_BATCH - 1:
                await asyncio.sleep(0)
            self._tasks.append(asyncio.create_task(self._user(u), name=f"user-{u}"))
        if not users:
            return
        n = len(users)
        late = max(0.0, time.perf_counter() - self._ramp_time(users[-1]))
        k, of = self.shard
        whose = f" of worker {k}/{of}" if of > 1 else ""
        data: dict[str, Any] = {"users": n, "late_s": round(late, 3), "phase": self.phase}
        if of > 1:
            data["worker"] = k
        self.recorder.event(
            RunEvent(
                self.now(),
                "users_started",
                f"all {n} users{whose} started ({late:.2f}s after the last one was due)",
                "info",
                data=data,
            )
        )

    # --- open-loop sessions -------------------------------------------------------------

    def _warmup_over(self) -> None:
        if not self.stop_new.is_set():
            self._show("running")

    async def _arrive(self) -> None:
        """Sessions arrive at the scenario's rate from a seeded process until the run stops
        starting turns; each is admitted at once, or queued first-in first-out while
        ``max_concurrent`` sessions are active. Arrival times are the process's own (not
        when the loop woke), so the offered load is exactly what was drawn."""
        spec = self.sc.arrivals
        assert spec is not None
        rng = random.Random(f"{self.sc.seed}:arrivals")
        self.live.open_loop = True
        t = self._t_phase
        while True:
            # the rate in force; a gap that crosses a schedule step restarts there at the
            # new rate (exact for Poisson, which is memoryless)
            rate, until = spec.rate_at(t - self._t_phase)
            gap = arrival_gap(rng, spec, rate)
            if until is not None and t - self._t_phase + gap > until:
                t = self._t_phase + until
                continue
            t += gap
            if t - time.perf_counter() > START_SLACK_S:
                if not await self._sleep_until(t):
                    break
            elif self._arrived % START_BATCH == START_BATCH - 1:
                await asyncio.sleep(0)  # behind schedule: still yield to the loop
            if self.stop_new.is_set():
                break
            u = self._arrived
            self._arrived += 1
            self.live.on_arrival(t - self.t0)
            if self._active >= (spec.max_concurrent or MAX_USERS):
                self._backlog.append((u, t))
                self.live.backlog = len(self._backlog)
            else:
                self._admit(u, t)

    def _admit(self, u: int, t_arrival: float) -> None:
        """Start session ``u`` now (it arrived at perf time ``t_arrival``)."""
        assert self.sc.arrivals is not None
        now = time.perf_counter()
        start = max(now, t_arrival)
        self._active += 1
        self._sessions[u] = (t_arrival, start, session_rounds(self.sc.seed, u, self.sc.arrivals))
        self.live.start_session(u)
        self._tasks.append(asyncio.create_task(self._user(u), name=f"session-{u}"))

    def _session_ended(self, u: int, rounds_done: int, reason: str) -> None:
        """One ``session_ended`` event per arrival (the run directory's arrival record)."""
        self._write_ended()  # the session's last record before its row goes
        t_arrival, t_start, rounds = self._sessions.pop(u, (0.0, 0.0, 0))
        if reason != "backlog":
            self._active -= 1
        self.live.end_session(u, admitted=reason != "backlog")
        self.recorder.event(
            RunEvent(
                self.now(),
                "session_ended",
                f"session {u}: {rounds_done}/{rounds} rounds ({reason})",
                "info",
                user=u,
                data={
                    "session": u,
                    "phase": self.phase,
                    "arrived": t_arrival - self.t0,
                    "admitted": None if reason == "backlog" else t_start - self.t0,
                    "wait_s": None if reason == "backlog" else t_start - t_arrival,
                    "rounds": rounds,
                    "rounds_done": rounds_done,
                    "reason": reason,
                },
            )
        )
        spec = self.sc.arrivals
        # a freed slot goes to the oldest waiting session (sessions of a stopping run
        # stay in the backlog and are recorded as never admitted)
        while (
            reason != "backlog"
            and self._backlog
            and not self.stop_new.is_set()
            and spec is not None
            and self._active < (spec.max_concurrent or MAX_USERS)
        ):
            self._admit(*self._backlog.popleft())
            self.live.backlog = len(self._backlog)

    def _drop_backlog(self) -> None:
        while self._backlog:
            u, t = self._backlog.popleft()
            self._sessions[u] = (t, t, session_rounds(self.sc.seed, u, self.sc.arrivals))  # type: ignore[arg-type]
            self.live.backlog = len(self._backlog)
            self._session_ended(u, 0, "backlog")
        self.recorder.event(
            RunEvent(
                self.now(),
                "arrivals_ended",
                f"{self._arrived} sessions arrived in {time.perf_counter() - self._t_phase:.1f}s",
                "info",
                data={
                    "phase": self.phase,
                    "arrivals": self._arrived,
                    "window_s": round(time.perf_counter() - self._t_phase, 6),
                    "started": round(self._t_phase - self.t0, 6),
                },
            )
        )

    async def _build_histories(self) -> None:
        """Build every user's ``start_tokens`` of history before the first user starts, in
        worker threads: tokenizing it on the loop would stall everyone's streams, and doing
        it at the user's ramp time would show up as client queueing in its first turn."""
        start = self.sc.conversation.start_tokens
        if start is None or start[1] == 0 or self.corpus is None or self.stop_new.is_set():
            return
        self._show("building histories")
        t = time.perf_counter()
        users = self._users
        batch = 4 * START_BATCH
        for first in range(0, len(users), batch):
            if self.stop_new.is_set():
                return
            part = users[first : first + batch]
            built = await asyncio.gather(
                *(asyncio.to_thread(self._history, u, start) for u in part)
            )
            self._histories.update(
                (u, h) for u, h in zip(part, built, strict=True) if h is not None
            )
        if not self._histories:
            return
        self._warm_rounds = max(self._warm_rounds, 1)  # for the live view's state only
        tokens = sum(h.tokens for h in self._histories.values())
        server_tokens = round(tokens / self.paste_scale)
        self.recorder.event(
            RunEvent(
                self.now(),
                "histories_built",
                f"{len(self._histories)} users' first conversations open with pre-built "
                f"history (~{server_tokens // len(self._histories):,} tokens each, "
                f"built in {time.perf_counter() - t:.1f}s); their first turn is warm-up",
                "info",
                data={"users": len(self._histories), "tokens": server_tokens, "phase": self.phase},
            )
        )

    def _history(self, u: int, start: tuple[int, int]) -> History | None:
        """User ``u``'s pre-built history, from its own seed: unique to the user, the same
        on every run with the same seed (the markers still keep runs apart)."""
        rng = random.Random(f"{self.sc.seed}:{u}:start")
        target = rng.randint(*start)
        if target <= 0 or self.corpus is None:
            return None
        turn = self.sc.conversation.turn
        reply_max = max(1, round(self.sc.request.max_tokens * self.paste_scale))
        return build_history(
            self.corpus,
            rng,
            round(target * self.paste_scale),
            self._paste_budget(),
            turn.ask,
            reply_max,
        )

    def _paste_budget(self) -> tuple[int, int]:
        """The paste's [min, max] in local-tokenizer tokens (the scenario's are the server's)."""
        paste = self.sc.conversation.turn.paste
        if paste is None:
            return (1, 1)
        lo = max(1, round(paste.tokens[0] * self.paste_scale))
        return lo, max(lo, round(paste.tokens[1] * self.paste_scale))

    def _ramp_time(self, u: int) -> float:
        """Perf time of user ``u``'s first turn."""
        n = self.sc.users.count
        return self._t_phase + (self.sc.users.ramp_up * u / n if n > 1 else 0.0)

    # --- trace replay -------------------------------------------------------------------

    async def _replay(self) -> None:
        """Send each request of the trace at its timestamp (divided by ``replay.speed``)
        from the start of the phase, open loop: none waits for another. A prompt is built
        (in a worker thread) before its send time comes; one built late is sent late, and
        the lateness is the record's ``queue_s``. Request ``i`` is user ``i``."""
        spec = self.sc.replay
        assert spec is not None and self.corpus is not None
        trace = self.trace
        salt = f"{self.sc.seed}:{self.nonce if spec.per_run else ''}"
        block = max(1, round(spec.block_size * self.paste_scale))
        builder = PromptBuilder(self.corpus, block, salt, self.stop_new.is_set)
        reuse = implied_reuse(trace, spec.block_size)
        self.live.open_loop = True
        t_first = trace[0].t_s if trace else 0.0
        sent = 0
        late_max = 0.0
        for u, req in enumerate(trace):
            if self.stop_new.is_set():
                break
            t = self._t_phase + (req.t_s - t_first) / spec.speed
            prompt = await asyncio.to_thread(builder.prompt, req)
            if t > time.perf_counter():  # never early: the lateness is the record's queue_s
                if not await self._sleep_until(t):
                    break
            elif u % START_BATCH == START_BATCH - 1:
                await asyncio.sleep(0)
            if self.stop_new.is_set():
                break
            late_max = max(late_max, time.perf_counter() - t)
            self.live.on_arrival(t - self.t0)
            self.live.start_session(u)
            warm = t < self._t_phase + spec.warmup
            self._tasks.append(
                asyncio.create_task(
                    self._replay_one(u, req, prompt, t, reuse[u], warm), name=f"replay-{u}"
                )
            )
            sent += 1
        window = time.perf_counter() - self._t_phase
        span = (trace[-1].t_s - t_first) / spec.speed if trace else 0.0
        self.recorder.event(
            RunEvent(
                self.now(),
                "replay_ended",
                f"replayed {sent}/{len(trace)} requests of the trace in {window:.1f}s "
                f"(trace span {span:.1f}s at speed {spec.speed:g}; latest send "
                f"{late_max:.3f}s after its time)",
                "info",
                data={
                    "phase": self.phase,
                    "requests": len(trace),
                    "sent": sent,
                    "window_s": round(window, 6),
                    "span_s": round(span, 6),
                    "speed": spec.speed,
                    "late_max_s": round(late_max, 6),
                    "started": round(self._t_phase - self.t0, 6),
                },
            )
        )

    async def _replay_one(
        self, u: int, req: TraceRequest, prompt: str, t_sched: float, reuse: int, warm: bool
    ) -> None:
        """One request of the trace: a single-turn chat, ``max_tokens`` its output_length."""
        rec = RequestRecord(
            user=u,
            conversation=1,
            round=1,
            turn=1,
            warmup=warm,
            prompt_tokens_est=req.input_length,
            reusable_tokens=reuse,
            conversation_tokens=req.input_length,
        )
        rec.phase = self.phase
        rec.request_id = request_id(self.nonce, u, 1)
        body = build_body(
            self.sc,
            self.model,
            [{"role": "user", "content": prompt}],
            max_tokens=req.output_length,
        )
        self.live.on_send(rec)
        self.recorder.request_started(rec)
        token_times: array[float] = array("d")
        try:
            await self.client.chat(body, rec, t_sched, token_times)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the client broke its promise: the record still tells
            rec.outcome, rec.error_class = "error", "client_error"
            rec.error = f"{type(e).__name__}: {e}"[:500]
        finally:
            self._finish(rec, token_times)
            self.live.end_session(u)

    # --- one user ----------------------------------------------------------------------

    async def _user(self, u: int) -> None:
        done = [0]  # rounds sent (a session's record of how far it got)
        reason = "stopped"
        try:
            await self._user_turns(u, done)
            if self.sc.arrivals is not None and done[0] >= self._sessions[u][2]:
                reason = "done"
        except asyncio.CancelledError:
            reason = "cancelled"
        except Exception as e:  # a bug must not take the run down: record it, stop this user
            self.recorder.event(
                RunEvent(
                    self.now(),
                    "user_crashed",
                    f"user {u} stopped: {type(e).__name__}: {e}",
                    "error",
                    user=u,
                )
            )
            reason = "crashed"
        finally:
            if self.sc.arrivals is not None:
                self._session_ended(u, done[0], reason)
            else:
                self.live.set_state(u, "done")

    async def _user_turns(self, u: int, done: list[int]) -> None:
        sc = self.sc
        conv_spec = sc.conversation
        rng = random.Random(f"{sc.seed}:{u}")
        rounds, think, warm_until = sc.rounds, sc.users.think_time, 0.0
        if sc.arrivals is not None:  # an open-loop session: K rounds from its admission
            _, t_next, rounds = self._sessions[u]
            think = sc.arrivals.think_time
            warm_until = self._t_phase + sc.arrivals.warmup
        else:
            t_next = self._ramp_time(u)
        if not await self._sleep_until(t_next):
            return
        conv_index = 1
        conv = self._new_conversation(u, conv_index)
        history = self._histories.pop(u, None)
        if history is not None:  # the first conversation only
            conv.prefill(history)
        paste = conv_spec.turn.paste
        ahead = _Ahead(u, random.Random(f"{sc.seed}:{u}:paste"))
        ahead.want_paste = paste is not None and self.corpus is not None
        ahead.want_paste &= conv_spec.turn.paste_on == "every"
        rnd = 0
        while not self.stop_new.is_set():
            if rounds is not None and rnd >= rounds:
                break
            rnd += 1
            done[0] = rnd
            if rnd == self._warm_rounds + 1 and self._warm_rounds and sc.arrivals is None:
                self._past_warmup += 1
                if self._past_warmup == len(self._users) and not self.stop_new.is_set():
                    self._show("running")
            excerpt = None
            pastes = conv_spec.turn.paste_on == "every" or conv.turns == 0
            if paste is not None and self.corpus is not None and pastes:
                excerpt, ahead.paste = ahead.paste or self._draw_paste(ahead), None
            question = rng.choice(conv_spec.turn.ask)
            q_tokens = self._ask_tokens.get(question)
            if q_tokens is None:  # each question of the scenario is counted once per run
                q_tokens = self._ask_tokens[question] = count_tokens(question)
            added = (excerpt.tokens if excerpt else 0) + q_tokens + MESSAGE_OVERHEAD
            if conv.turns > 0 and conv.known_tokens() + added > conv_spec.ceiling_tokens:
                conv_index += 1
                conv = self._next_conversation(ahead, conv_index)
            user_text = conv.user_message(excerpt.text if excerpt else None, question)
            messages = conv.request_messages(user_text)
            # the message's parts are counted already: paste + "\n\n" + question (the
            # shared cache's first message carries a marker: counted whole, once)
            if conv.cache == "shared" and len(conv.messages) == 1:
                user_tokens = count_tokens(user_text)
            else:
                user_tokens = (excerpt.tokens + 1 if excerpt else 0) + q_tokens
            prompt_est = conv.tokens_est + user_tokens + MESSAGE_OVERHEAD
            # a turn that sends pre-built history is warm-up: the server sees it all at once
            prefilled = conv.prefilled_tokens if conv.turns == 0 else 0
            rec = RequestRecord(
                user=u,
                conversation=conv_index,
                round=rnd,
                turn=conv.turns + 1,
                warmup=rnd <= sc.warmup.rounds or prefilled > 0 or t_next < warm_until,
                prompt_tokens_est=prompt_est,
                reusable_tokens=conv.reusable_tokens() if conv_spec.cache != "cold" else 0,
                conversation_tokens=conv.known_tokens() + added,
                paste_tokens=excerpt.tokens if excerpt else 0,
                prefilled_tokens=round(prefilled / self.paste_scale),
            )
            rec.phase = self.phase
            rec.request_id = request_id(self.nonce, u, rnd)
            body = build_body(sc, self.model, messages)
            self.live.on_send(rec)
            self.recorder.request_started(rec)
            reply = Reply("", "")
            token_times: array[float] = array("d")  # when each text chunk arrived
            if rounds is None or rnd < rounds:  # a next turn may come: prepare its parts
                ahead.next_index = conv_index + 1
                self._ahead.append(ahead)
                self._schedule_later()
            try:
                reply = await self.client.chat(body, rec, t_next, token_times)
            except Exception as e:  # the client broke its promise: the record still tells
                rec.outcome, rec.error_class = "error", "client_error"
                rec.error = f"{type(e).__name__}: {e}"[:500]
                raise
            finally:
                self._finish(rec, token_times, defer=True)
            if rec.outcome in ("ok", "reasoning_only"):
                # the server's count of the reply, when it gave one for what is kept
                served = rec.tokens_source == "usage" and (
                    not reply.reasoning or conv.keep_reasoning
                )
                conv.commit_turn(
                    user_text,
                    reply.content,
                    reply.reasoning,
                    rec.prompt_tokens,
                    user_tokens=user_tokens,
                    reply_tokens=rec.completion_tokens if served else None,
                )
            elif rec.error_class == "context_exceeded":
                if rec.prompt_tokens is not None and rec.prompt_source != "estimate":
                    size = f"{rec.prompt_tokens:,}-token (server's count)"
                else:
                    size = f"~{rec.conversation_tokens:,}-token (stress's estimate)"
                self.recorder.event(
                    RunEvent(
                        self.now(),
                        "context_exceeded",
                        f"user {u}: server refused a {size} conversation as too long; "
                        "starting a new conversation (lower conversation.ceiling_tokens)",
                        "warning",
                        user=u,
                    )
                )
                conv_index += 1
                conv = self._next_conversation(ahead, conv_index)
            if sc.arrivals is not None and rnd >= (rounds or 0):
                break  # the session's last round: it leaves without thinking again
            t_next = time.perf_counter() + think_seconds(rng, think)
            if rec.error_class == "http_429" and rec.retry_after_s:
                t_next = max(t_next, time.perf_counter() + rec.retry_after_s)
            self.live.set_state(u, "thinking", until=t_next - self.t0)
            if not await self._sleep_until(t_next):
                break

    def _draw_paste(self, ahead: _Ahead) -> Excerpt:
        """The user's next paste, from its own stream of draws."""
        assert self.corpus is not None
        return self.corpus.excerpt(ahead.rng, *self._paste_budget())

    def _next_conversation(self, ahead: _Ahead, index: int) -> Conversation:
        """Conversation ``index`` of the user: the one prepared ahead, else a new one."""
        conv, ahead.conversation = ahead.conversation, None
        if conv is None or conv.index != index:
            conv = self._new_conversation(ahead.user, index)
        return conv

    def _schedule_later(self) -> None:
        """Run ``_later`` when the loop next turns (once for all who ask in this turn)."""
        if not self._later_due:
            self._later_due = True
            asyncio.get_running_loop().call_soon(self._later)

    def _later(self) -> None:
        """What waits for the loop's next turn, after this turn's requests went out: the
        records of requests that ended ``ok`` (``_finish``) and the next turns' parts
        (``_prepare_ahead``). With no think time, the users whose replies ended together
        send one after the other, and whatever sits between two of those sends delays
        the second: on a server that paces each stream from its request's arrival, that
        spread the streams over more wakes of both processes (docs/performance.md)."""
        self._later_due = False
        self._write_ended()
        self._prepare_ahead()

    def _prepare_ahead(self) -> None:
        """Draw the next paste and make the conversation a rollover would open, for each
        user whose request just went out. A failure here is left to the user's own turn,
        which makes the part on the spot and meets it there (``user_crashed``)."""
        todo, self._ahead = self._ahead, []
        if self.stop_new.is_set():
            return
        for ahead in todo:
            try:
                if ahead.want_paste and ahead.paste is None:
                    ahead.paste = self._draw_paste(ahead)
                conv = ahead.conversation
                if conv is None or conv.index != ahead.next_index:
                    ahead.conversation = self._new_conversation(ahead.user, ahead.next_index)
            except Exception:  # the user's turn makes the part on the spot and says why
                continue

    def _new_conversation(self, u: int, index: int) -> Conversation:
        spec = self.sc.conversation
        return Conversation(
            user=u,
            index=index,
            cache=spec.cache,
            run_nonce=self.nonce,
            system_prompt=spec.system_prompt,
            keep_reasoning=spec.keep_reasoning,
        )

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
