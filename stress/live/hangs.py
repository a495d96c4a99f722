"""One hang, one event: the two hang detectors report through a gate.

A hang is seen from two sides (field note 5): the client's watch (requests in flight, not a
byte on any stream, ``stress.runtime.background.monitor``) and the server collector (work
waiting, no generation progress in /metrics). Each wrote its own ``hang_suspected``, so one
hang counted as two (issue 13). Both now report here: the first detector to see a hang emits
``hang_suspected`` (with its ``source``); a second one that sees the same hang emits
``hang_corroborated`` (info, its source kept); ``hang_cleared`` comes when the last
detector clears, earlier clears are ``hang_partly_cleared``. So counting
``hang_suspected`` counts hangs, and the record still says who noticed what, when.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stress.core.events import RunEvent

HANG_KINDS = ("hang_suspected", "hang_cleared")


class HangGate:
    def __init__(self, emit: Callable[[RunEvent], None]) -> None:
        self._emit = emit
        self._seeing: set[str] = set()
        """Detectors (event sources) that currently see a hang."""

    @property
    def hung(self) -> bool:
        return bool(self._seeing)

    def event(self, ev: RunEvent) -> None:
        if ev.kind == "hang_suspected":
            if self._seeing and ev.source not in self._seeing:
                ev.kind, ev.severity = "hang_corroborated", "info"
                ev.data = {**ev.data, "same_hang_as": sorted(self._seeing)}
            self._seeing.add(ev.source)
        elif ev.kind == "hang_cleared":
            self._seeing.discard(ev.source)
            if self._seeing:
                ev.kind, ev.severity = "hang_partly_cleared", "info"
                ev.data = {**ev.data, "still_seen_by": sorted(self._seeing)}
        self._emit(ev)


class GatedSink:
    """A collector's sink whose hang events pass through the gate; the rest go straight on."""

    def __init__(self, sink: Any, gate: HangGate) -> None:
        self._sink = sink
        self._gate = gate

    def write(self, stream: str, record: dict[str, Any]) -> None:
        self._sink.write(stream, record)

    def event(self, ev: RunEvent) -> None:
        if ev.kind in HANG_KINDS:
            self._gate.event(ev)
        else:
            self._sink.event(ev)
