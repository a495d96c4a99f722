"""The closed loop (``users:``): N users from a ramp-up, each thinking between its turns.

The offered load follows the server: a user sends its next turn only after its reply and
its think time. User ``u`` starts at its offset in ``users.ramp_up`` and sends
``rounds`` turns (or until the run stops starting turns); in a worker process only the
users of its shard run, under their global ids.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from stress.core.events import RunEvent
from stress.load.turns import START_BATCH, START_SLACK_S, LoadSetup
from stress.load.users import ChatUsers, Plan


class ClosedUsers(ChatUsers):
    """Closed-loop users: a fixed population, each its own task from its ramp time."""

    def __init__(self, setup: LoadSetup) -> None:
        super().__init__(setup)
        self._past_warmup = 0
        """Users past the scenario's warm-up rounds (the phase is running when all are)."""

    def _plan(self, u: int) -> Plan:
        return Plan(self._ramp_time(u), self.sc.rounds, self.sc.users.think_time)

    def _ramp_time(self, u: int) -> float:
        """Perf time of user ``u``'s first turn."""
        n = self.sc.users.count
        return self._t_phase + (self.sc.users.ramp_up * u / n if n > 1 else 0.0)

    def _warmup_rounds_done(self, u: int) -> None:
        self._past_warmup += 1
        if self._past_warmup == len(self._users) and not self.stop_new.is_set():
            self._show("running")

    def _user_ended(self, u: int, rounds_done: int, reason: str) -> None:
        self.live.set_state(u, "done")

    async def _start(self) -> None:
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
        if users:
            self._users_started(max(0.0, time.perf_counter() - self._ramp_time(users[-1])))

    def _users_started(self, late: float) -> None:
        """The ``users_started`` event: every user started, ``late`` s after the last was due."""
        n = len(self._users)
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

    def _after_start(self) -> None:
        for u in self._users[len(self._tasks) :]:  # stopped before their turn came
            self.live.set_state(u, "done")
