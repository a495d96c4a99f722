"""Request deadlines: the first token, then silence since the last byte, and the total.

Every request in flight has a ``Watchdog``; one sweeping timer (``Deadlines``) checks them
all rather than a timer per request or per read, and cancels the task of a request past a
deadline, naming which. The reply reader stamps ``last`` on every read.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from stress.core.record import ErrorClass


@dataclass(frozen=True, slots=True)
class TimeoutPolicy:
    connect: float
    first_token: float
    stall: float
    total: float


class Watchdog:
    """One request's deadlines: the first token (then silence since the last byte, a
    stall) and the total. ``last`` is stored once per read; ``Deadlines`` checks them."""

    __slots__ = ("fired", "first", "last", "t0", "task")

    def __init__(self, task: asyncio.Task[object], t0: float) -> None:
        self.task = task
        self.t0 = t0
        self.last = t0
        self.first = False
        self.fired: ErrorClass | None = None

    def got_first(self) -> None:
        """The first token arrived: from now on silence is a stall."""
        self.first = True


class Deadlines:
    """The watchdogs of every request in flight, checked by one timer.

    A timer per request (armed at the send, re-armed at the first token, cancelled at the
    end) cost more than the rest of a short request's bookkeeping; here a request costs a
    set insert and a removal, and one sweep every ``tick`` seconds (a tenth of the shortest
    timeout, at most 0.1 s) cancels the task of each request whose deadline has passed,
    naming which (``fired``). So a timeout fires at most ``tick`` late. The timer runs only
    while requests are in flight."""

    __slots__ = ("_handle", "_live", "policy", "tick")

    def __init__(self, policy: TimeoutPolicy) -> None:
        self.policy = policy
        shortest = min(policy.first_token, policy.stall, policy.total)
        self.tick = min(0.1, max(0.005, shortest / 10))
        self._live: set[Watchdog] = set()
        self._handle: asyncio.TimerHandle | None = None

    def start(self, t0: float) -> Watchdog:
        task = asyncio.current_task()
        assert task is not None
        wd = Watchdog(task, t0)
        self._live.add(wd)
        if self._handle is None:
            self._handle = asyncio.get_running_loop().call_later(self.tick, self._sweep)
        return wd

    def stop(self, wd: Watchdog) -> None:
        self._live.discard(wd)

    def _sweep(self) -> None:
        self._handle = None
        if not self._live:
            return
        now = time.perf_counter()
        p = self.policy
        fired: list[Watchdog] = []
        for wd in self._live:
            if now - wd.t0 >= p.total:
                wd.fired = "total_timeout"
            elif wd.first:
                if now - wd.last >= p.stall:
                    wd.fired = "stall"
            elif now - wd.t0 >= p.first_token:
                wd.fired = "first_token_timeout"
            if wd.fired is not None:
                fired.append(wd)
        for wd in fired:
            self._live.discard(wd)
            wd.task.cancel()
        self._handle = asyncio.get_running_loop().call_later(self.tick, self._sweep)
