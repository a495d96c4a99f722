"""The run plan: what a run does, decided once from the scenario and its overrides.

A phased scenario's busiest step, not its base, decides how many users run at once, and
every part of a run that is sized by that count (the chat connection pool, the worker
processes, the live view's rows, the pre-flight check, the header and the metrics) reads
it here. Deriving it again elsewhere is how a run ended up with five connections for an
eight-user phase, its users' wait for a connection counted as their time to first token.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from stress.config.scenario import Scenario, phase_plan, time_scaled, worker_count

CONNECTION_HEADROOM = 4
"""Connections over the peak: a user's re-send on a fresh connection (a pooled one the
server closed) opens one before the old one is forgotten."""


@dataclass(frozen=True, slots=True)
class RunPlan:
    """The steps of a run and the counts that size it."""

    steps: tuple[tuple[str, Scenario], ...]
    """Each step (a phase, or ``main``) with its label, in wall seconds at the run's time
    scale, in the order they run."""
    users: int
    """The most closed-loop users of any step (0 for open-loop arrivals and replay): the
    live view's rows and what the workers share."""
    peak: int
    """The most users or sessions active at once in any step: closed-loop users, the
    session cap (or a bound from the rate) for arrivals, a fixed bound for replay."""
    workers: int
    """Client processes that share the users (1: the users run in this process)."""

    @property
    def first(self) -> Scenario:
        return self.steps[0][1]

    def connections(self, users: int | None = None) -> int:
        """The chat connection pool's size for ``users`` of the plan's users (all of them
        by default): never fewer than the users that can be waiting for a reply at once, so
        no request waits on the client for a connection the server would have served."""
        need = self.peak if users is None else users
        return max(need, self.first.connection.limit or 0) + CONNECTION_HEADROOM

    def worker_users(self, k: int) -> int:
        """How many of the plan's users worker ``k`` runs (user u runs in worker u % N)."""
        return len(range(k, self.users, self.workers))

    def manifest(self) -> dict[str, Any]:
        """What the run directory keeps of the plan: the analysis reads its counts rather
        than deriving them again from the scenario."""
        return {
            "steps": [label for label, _ in self.steps],
            "users": self.users,
            "peak": self.peak,
            "workers": self.workers,
            "connections": self.connections(),
        }

    def with_workers(self, n: int) -> RunPlan:
        return replace(self, workers=n)


def plan_run(scenario: Scenario, time_scale: float = 1.0, cpus: int | None = 1) -> RunPlan:
    """The plan for ``scenario`` (overrides already applied), its durations scaled by
    ``time_scale``; ``cpus`` decides ``workers: auto``."""
    steps = tuple((label, time_scaled(step, time_scale)) for label, step in phase_plan(scenario))
    open_loop = scenario.arrivals is not None or scenario.replay is not None
    users = 0 if open_loop else max(step.users.count for _, step in steps)
    workers = 1 if open_loop else worker_count(scenario, cpus)
    return RunPlan(steps, users, max(step.peak_users for _, step in steps), workers)
