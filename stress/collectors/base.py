"""The contract between the engine and every collector.

A collector samples something at an interval while the run lasts, appends raw samples to
its own JSONL stream in the run directory (``server.jsonl``, ``gpu.jsonl``...) through the
sink, raises run events for notable things (a restart, an Xid), keeps a small bounded live
view for the UI, and reports a summary at the end. It never raises out of ``run``: a
collector that breaks records an event and stops sampling, the run goes on.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Protocol

from stress.core.events import RunEvent


class Sink(Protocol):
    """Where collectors write. Implemented by the recorder (and by fakes in tests)."""

    def write(self, stream: str, record: dict[str, Any]) -> None:
        """Append ``record`` as one line to ``<stream>.jsonl`` (buffered, flushed ~1 s)."""

    def event(self, ev: RunEvent) -> None:
        """Record and show a run event."""


@dataclass(frozen=True, slots=True)
class RunClock:
    """Seconds since run start, from ``perf_counter_ns``; wall time only as a label."""

    t0_ns: int
    wall_t0: float

    @classmethod
    def start(cls) -> RunClock:
        return cls(time.perf_counter_ns(), time.time())

    def now(self) -> float:
        return (time.perf_counter_ns() - self.t0_ns) / 1e9


class Collector(ABC):
    """Base class for collectors; see the module docstring for the contract."""

    name: str = "collector"

    def __init__(self, sink: Sink, clock: RunClock, interval_s: float) -> None:
        self.sink = sink
        self.clock = clock
        self.interval_s = interval_s

    @abstractmethod
    async def run(self, stop: asyncio.Event) -> None:
        """Sample every ``interval_s`` on fixed deadlines until ``stop`` is set."""

    def live(self) -> dict[str, Any]:
        """A small, bounded view of the latest state, for snapshots and the UI."""
        return {}

    def summary(self) -> dict[str, Any]:
        """Figures for ``summary.json`` once the run has ended."""
        return {}
