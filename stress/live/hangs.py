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

The server collector's ``server_down`` / ``server_back`` pass here too, written as they
came: a frozen process's health checks time out, so a freeze also reads as an outage. When
one of them is part of a hang (``stress.analysis.hangs.in_freeze``, whichever of the two was
seen first) the gate adds a ``server_frozen`` event (info) saying so, once: the live badge
counts outages as ``server_down`` less ``server_frozen``, as the verdict counts them from
the events read back (``outage_count``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from stress.analysis.hangs import Down, Hang, back, freeze_of, merge, same_hang, silence_start
from stress.core.events import RunEvent

HANG_KINDS = ("hang_suspected", "hang_cleared")
DOWN_KINDS = ("server_down", "server_back")
FROZEN_KIND = "server_frozen"
"""The gate's event: the ``server_down`` that began at its ``down_since_s`` is a frozen
process inside a hang, not an outage (written when the gate finds it so, once)."""
RECENT = 8
"""Hangs, and timed-out downs not yet matched to one, the gate remembers: a down overlaps
one of the last few hangs, or none (a long flapping run stays bounded)."""


class HangGate:
    def __init__(self, emit: Callable[[RunEvent], None]) -> None:
        self._emit = emit
        self._seeing: set[str] = set()
        """Detectors (event sources) that currently see a hang."""
        self._last: Hang | None = None
        """The current hang, or the last one (cleared): a late detection may be it."""
        self._hangs: deque[Hang] = deque(maxlen=RECENT)
        """The last few hangs, ``_last`` the newest: a down may overlap any of them."""
        self._downs: deque[Down] = deque(maxlen=RECENT)
        """Timed-out downs not yet found inside a hang, the newest maybe still open."""

    @property
    def hung(self) -> bool:
        return bool(self._seeing)

    @property
    def last(self) -> Hang | None:
        return self._last

    def event(self, ev: RunEvent) -> None:
        if ev.kind in DOWN_KINDS:
            self._down(ev)
        else:
            self._hang(ev)
        self._frozen(ev.t)

    def _hang(self, ev: RunEvent) -> None:
        """A detector sees a hang, or clears it: counted once, cleared by the last one."""
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
            self._hangs.append(self._last)
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

    def _down(self, ev: RunEvent) -> None:
        """The server's health checks failed, or answer again: written as it came; a down
        whose checks timed out is remembered (it may be a freeze), its back closes it."""
        self._emit(ev)
        if ev.kind == "server_down":
            down = Down(ev.t, None, str(ev.data.get("reason") or ""))
            if down.timed_out:
                self._downs.append(down)
        elif self._downs and self._downs[-1].back_s is None:
            self._downs[-1] = back(self._downs[-1], {"t": ev.t, "data": ev.data})

    def _frozen(self, t: float) -> None:
        """Say once of each remembered down that is part of a hang that it is no outage."""
        for down in list(self._downs):
            hang = freeze_of(down, self._hangs)
            if hang is None:
                continue
            self._downs.remove(down)
            self._emit(
                RunEvent(
                    t,
                    FROZEN_KIND,
                    f"the server stopped answering its health checks ({down.reason}) during "
                    f"the hang first seen at {hang.first_detected_s:.0f}s: frozen, counted as "
                    "the hang, not as an outage",
                    "info",
                    source="server",
                    data={
                        "down_since_s": round(down.start_s, 3),
                        "reason": down.reason,
                        "hang_first_detected_s": round(hang.first_detected_s, 3),
                    },
                )
            )


class GatedSink:
    """A collector's sink whose hang events pass through the gate; the rest go straight on."""

    def __init__(self, sink: Any, gate: HangGate) -> None:
        self._sink = sink
        self._gate = gate

    def write(self, stream: str, record: dict[str, Any]) -> None:
        self._sink.write(stream, record)

    def event(self, ev: RunEvent) -> None:
        if ev.kind in HANG_KINDS or ev.kind in DOWN_KINDS:
            self._gate.event(ev)
        else:
            self._sink.event(ev)
