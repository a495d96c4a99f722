"""What runs the plan's steps: one interface over this process's engine and worker processes.

The run (``stress.runtime.run``) drives an ``Executor`` phase by phase and stops it on
Ctrl-C, a limit or a failed write, without knowing where the users run. Two implement it:

- ``InProcess``: one ``Engine`` per step of the plan, in this process (``--workers 1``);
- ``stress.runtime.pool.WorkerPool``: worker processes, started by a launcher: local
  subprocesses, or actors of a Ray cluster (``stress.runtime.ray_pool.RayLauncher``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from stress.config.scenario import Scenario
from stress.load.engine import Engine
from stress.net.client import ChatClient


class Executor(Protocol):
    """Runs the plan's steps and stops them; every request it sent has its record once
    ``close`` returns."""

    def request_stop(self, reason: str) -> None:
        """No new turns; requests in flight finish."""

    def cancel_in_flight(self) -> None:
        """Cancel the requests in flight (each still gets its record)."""

    async def run_phase(self, index: int) -> str:
        """Run step ``index`` of the plan; the run's exit reason for it."""
        ...

    @property
    def last_byte(self) -> float:
        """When any stream last received bytes (perf time), for the hang watch."""
        ...

    @property
    def first_written(self) -> asyncio.Event | None:
        """Set once this process has written its first request (None: other processes
        send): the GPU collector opens its cards after it."""
        ...

    async def close(self) -> None:
        """Every request's record is in; called before the run's files close."""

    async def reap(self) -> None:
        """Let go of what ran the users (processes, a cluster's CPUs), after the files."""

    async def abort(self) -> None:
        """The run could not start: let go of everything now."""

    def health(self) -> dict[str, dict[str, Any]] | None:
        """Each worker's own client health (collectors.json ``workers``); None in-process."""
        ...


class InProcess:
    """The plan's steps run by engines of this process, one engine per step."""

    def __init__(
        self,
        steps: Sequence[tuple[str, Scenario]],
        make_engine: Callable[[str, Scenario], Engine],
        client: ChatClient,
    ) -> None:
        self._steps = steps
        self._make = make_engine
        self._client = client
        # the first engine exists before the run starts: a Ctrl-C at once reaches it
        self._engine = make_engine(*steps[0])

    def request_stop(self, reason: str) -> None:
        self._engine.request_stop(reason)

    def cancel_in_flight(self) -> None:
        self._engine.cancel_in_flight()

    async def run_phase(self, index: int) -> str:
        if index:
            self._engine = self._make(*self._steps[index])
        return (await self._engine.run()).exit_reason

    @property
    def last_byte(self) -> float:
        return self._client.last_byte

    @property
    def first_written(self) -> asyncio.Event | None:
        return self._client.first_written

    async def close(self) -> None:
        await self._client.close()

    async def reap(self) -> None:
        return None

    async def abort(self) -> None:
        await self._client.close()

    def health(self) -> None:
        return None
