"""One hang, one event: the two hang detectors report through a gate.

A hang is seen from two sides (field note 5): the client's watch (requests in flight, not a
byte on any stream, ``stress.runtime.background.monitor``) and the server collector (work
waiting, no generation progress in /metrics). Each wrote its own ``hang_suspected``, so one
hang counted as two (issue 13). Both now report here: the first detector to see a hang emits
``hang_suspected`` (with its ``source``); a second one that sees the same hang emits
``hang_corroborated`` (info, its source kept); ``hang_cleared`` comes when the last
detector clears, earlier clears are ``hang_partly_cleared``. So counting
``hang_suspected`` counts hangs, and the record still says who noticed what, when.

A detector can also see a hang after the others have cleared it: a server frozen with
SIGSTOP answers no scrape until it resumes, so its collector reports the freeze just after
the client's watch cleared it (issue 35). Whether that is the same hang is decided by
``stress.analysis.hangs.same_hang`` on the silence each detection reports (its
``silent_since_s``): the same hang is written as ``hang_corroborated`` with ``late: true``
and the hang's first detection time, never as a second ``hang_suspected``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stress.analysis.hangs import Hang, merge, same_hang, silence_start
from stress.core.events import RunEvent

HANG_KINDS = ("hang_suspected", "hang_cleared")


class HangGate:
    def __init__(self, emit: Callable[[RunEvent], None]) -> None:
        self._emit = emit
        self._seeing: set[str] = set()
        """Detectors (event sources) that currently see a hang."""
        self._last: Hang | None = None
        """The current hang, or the last one (cleared): a late detection may be it."""

    @property
    def hung(self) -> bool:
        return bool(self._seeing)

    @property
    def last(self) -> Hang | None:
        return self._last

    def event(self, ev: RunEvent) -> None:
        if ev.kind == "hang_suspected":
            self._detected(ev)
        elif ev.kind == "hang_cleared":
            self._seeing.discard(ev.source)
            if self._seeing:
                ev.kind, ev.severity = "hang_partly_cleared", "info"
                ev.data = {**ev.data, "still_seen_by": sorted(self._seeing)}
            elif self._last is not None:
                self._last.cleared_s = ev.t
        self._emit(ev)

    def _detected(self, ev: RunEvent) -> None:
        """A detector sees a hang: a new one, or (open or cleared) the one already counted."""
        since = silence_start(ev.t, ev.data)
        hang = self._last
        if hang is None or not same_hang(since, hang):
            self._last = Hang(ev.t, since, None, [ev.source])
            self._seeing.add(ev.source)
            return
        late = hang.cleared_s is not None
        others = sorted(self._seeing) or list(hang.seen_by)
        merge(hang, ev.t, since, ev.source)
        self._seeing.add(ev.source)
        ev.kind, ev.severity = "hang_corroborated", "info"
        ev.data = {
            **ev.data,
            "same_hang_as": others,
            "first_detected_s": round(hang.first_detected_s, 3),
        }
        if late:
            ev.data["late"] = True


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
