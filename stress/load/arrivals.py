"""Open-loop sessions (``arrivals:``): chats that open at a rate, talk a few turns, leave.

The offered load does not follow the server: sessions arrive from a seeded process
(Poisson, or gamma for bursts; the rate may follow a schedule) whatever the server's
state, each for the rounds it drew; past ``max_concurrent`` active sessions, arrivals wait
in a first-in first-out backlog, and those still waiting when the run stops are recorded
as never admitted. User ids are sessions, allocated on arrival; every session ends in one
``session_ended`` event, the run directory's arrival record.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque

from stress.config.scenario import MAX_USERS, Arrivals
from stress.core.events import RunEvent
from stress.load.turns import START_BATCH, START_SLACK_S, LoadSetup
from stress.load.users import ChatUsers, Plan


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


class OpenArrivals(ChatUsers):
    """Open-loop sessions: each admitted session is a user's task for its rounds."""

    def __init__(self, setup: LoadSetup) -> None:
        super().__init__(setup)
        spec = self.sc.arrivals
        assert spec is not None
        self._spec: Arrivals = spec
        self._backlog: deque[tuple[int, float]] = deque()
        """Sessions waiting for a slot under ``max_concurrent``: (session, arrival perf time)."""
        self._active = 0
        self._arrived = 0
        self._sessions: dict[int, tuple[float, float, int]] = {}
        """Active sessions: arrival and admission perf times, rounds drawn."""

    def _plan(self, u: int) -> Plan:
        """K rounds from its admission; turns before the warm-up's end are warm-up."""
        _, t_start, rounds = self._sessions[u]
        spec = self._spec
        return Plan(t_start, rounds, spec.think_time, self._t_phase + spec.warmup, leaves=True)

    def _warm(self) -> bool:
        return bool(self._warm_rounds) or self._spec.warmup > 0

    def _begin(self, loop: asyncio.AbstractEventLoop) -> asyncio.TimerHandle | None:
        if self._spec.warmup > 0:
            return loop.call_later(self._spec.warmup, self._warmup_over)
        return None

    def _warmup_over(self) -> None:
        if not self.stop_new.is_set():
            self._show("running")

    async def _start(self) -> None:
        """Sessions arrive at the scenario's rate from a seeded process until the run stops
        starting turns; each is admitted at once, or queued first-in first-out while
        ``max_concurrent`` sessions are active. Arrival times are the process's own (not
        when the loop woke), so the offered load is exactly what was drawn."""
        spec = self._spec
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
        now = time.perf_counter()
        start = max(now, t_arrival)
        self._active += 1
        self._sessions[u] = (t_arrival, start, session_rounds(self.sc.seed, u, self._spec))
        self.live.start_session(u)
        self._tasks.append(asyncio.create_task(self._user(u), name=f"session-{u}"))

    def _user_ended(self, u: int, rounds_done: int, reason: str) -> None:
        if reason == "stopped" and rounds_done >= self._sessions[u][2]:
            reason = "done"  # every round it drew was sent
        self._session_ended(u, rounds_done, reason)

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
        # a freed slot goes to the oldest waiting session (sessions of a stopping run
        # stay in the backlog and are recorded as never admitted)
        while (
            reason != "backlog"
            and self._backlog
            and not self.stop_new.is_set()
            and self._active < (self._spec.max_concurrent or MAX_USERS)
        ):
            self._admit(*self._backlog.popleft())
            self.live.backlog = len(self._backlog)

    def _after_start(self) -> None:
        """The sessions still waiting are recorded as never admitted; arrivals have ended."""
        while self._backlog:
            u, t = self._backlog.popleft()
            self._sessions[u] = (t, t, session_rounds(self.sc.seed, u, self._spec))
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
