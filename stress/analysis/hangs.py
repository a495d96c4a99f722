"""One freeze, one hang: the rule that decides whether two hang detections are one hang.

Two detectors see a hang (field note 5): the client's watch (requests in flight, not a byte
on any stream) and the server collector (work waiting, no generation progress in /metrics).
They see it at different times: a server frozen with SIGSTOP answers no scrape while it is
frozen, so its collector reports the hang only after the server resumes, when the client's
watch has often already cleared it (issue 35: a 90 s freeze counted as two hangs). So a
detection is judged by the silence it saw, not by when it came: it is the same hang as the
previous one when that hang is still open, or when the silence it reports began before that
hang cleared (``MERGE_GRACE_S`` allowed for the detectors' own sampling). A separate freeze
later starts its silence after the earlier one cleared, so it is counted again.

The live gate (``stress.live.hangs``) applies ``same_hang`` as events come, so
``events.jsonl`` has one ``hang_suspected`` per hang; ``hangs_from_events`` applies it to
the events read back, so the verdict, ``summary.json`` and the report count distinct hangs
even for a run recorded before the gate merged late detections.

A frozen process is one hang, not also an outage. While it is stopped its kernel
still accepts the collector's connections (the listen backlog) and nothing answers them, so
its health checks fail by timeout and the collector writes ``server_down``; a dead or
restarting server refuses the connection instead. So a ``server_down`` whose reason is a
timeout (``FREEZE_REASONS``) and whose down period overlaps a hang (from its silence to its
clear, ``MERGE_GRACE_S`` either side) is that freeze seen from the health checks
(``in_freeze``): the verdict, ``summary.json`` and the live badge count the hang and not an
outage (``outage_count``; live, the gate's ``server_frozen`` event), and the hang carries
how long the health checks went unanswered (``Hang.health_silent_s``). A refused-connection
outage, or a timed-out one without a hang, is still an outage.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MERGE_GRACE_S = 2.0
"""Slack on "the silence began before the previous hang cleared": the client's watch looks
once a second, so it clears up to a second late or early against the bytes, and the server
collector's last progress is up to one scrape interval before the freeze."""

DETECTION_KINDS = frozenset({"hang_suspected", "hang_corroborated"})
"""Events that say a detector sees a hang: the first of a hang, or another detector's."""

FREEZE_REASONS = frozenset({"timeout", "cannot connect: timeout"})
"""The ``server_down`` reasons of a stopped process (``ServerCollector._reachability``
writes ``FetchError.short``): the connection is accepted by the kernel and never answered,
or, once the stopped process's listen backlog is full, never accepted in time. A dead or
restarting server gives ``cannot connect: Connection refused`` (or an HTTP 5xx) instead."""


@dataclass(slots=True)
class Hang:
    """One hang, whichever detectors saw it (each detection merged into it)."""

    first_detected_s: float
    """The earliest detection (run seconds): when stress first said so."""
    silent_since_s: float
    """When the silence the detectors saw began, the earliest any of them reports."""
    cleared_s: float | None = None
    """When the last detector cleared it (None: it had not cleared when the run ended)."""
    seen_by: list[str] = field(default_factory=list)
    """The detectors (event sources) that saw it, first first."""
    health_silent_s: float | None = None
    """How long the server's health checks timed out during it (``in_freeze``): a frozen
    process, counted as this hang and not as an outage. None: they kept answering."""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "first_detected_s": round(self.first_detected_s, 3),
            "silent_since_s": round(self.silent_since_s, 3),
            "cleared_s": None if self.cleared_s is None else round(self.cleared_s, 3),
            "seen_by": list(self.seen_by),
        }
        if self.health_silent_s is not None:
            out["health_silent_s"] = round(self.health_silent_s, 3)
        return out


@dataclass(frozen=True, slots=True)
class Down:
    """One period the server's health checks failed: from the first failed check (or its
    ``server_down``) to its ``server_back``."""

    start_s: float
    back_s: float | None
    """When it answered again (None: not yet, or not before the run ended)."""
    reason: str
    """The ``server_down``'s reason: ``timeout``, ``cannot connect: Connection refused``..."""
    event: int | None = None
    """The ``server_down``'s position among the events it was read from (None: live)."""

    @property
    def timed_out(self) -> bool:
        """Its checks timed out, as a frozen process's do (``FREEZE_REASONS``)."""
        return self.reason in FREEZE_REASONS

    def seconds(self, last_t: float) -> float:
        """How long it lasted; one still down lasted until ``last_t`` at least."""
        return max(0.0, (last_t if self.back_s is None else self.back_s) - self.start_s)


def silence_start(t: float, data: Mapping[str, Any] | None) -> float:
    """When the silence a detection reports began: its ``silent_since_s``, else its
    ``stalled_s`` before ``t`` (the server collector's events of older runs), else ``t``."""
    data = data or {}
    since = data.get("silent_since_s")
    if isinstance(since, int | float):
        return min(float(since), t)
    stalled = data.get("stalled_s")
    if isinstance(stalled, int | float):
        return t - float(stalled)
    return t


def same_hang(since: float, previous: Hang | None) -> bool:
    """Whether a detection whose silence began at ``since`` is ``previous`` seen again:
    ``previous`` is still open, or its silence began before it cleared (plus the grace)."""
    if previous is None:
        return False
    if previous.cleared_s is None:
        return True
    return since <= previous.cleared_s + MERGE_GRACE_S


def merge(hang: Hang, t: float, since: float, source: str) -> None:
    """Fold one more detection into ``hang``: the earliest times are kept."""
    hang.first_detected_s = min(hang.first_detected_s, t)
    hang.silent_since_s = min(hang.silent_since_s, since)
    hang.cleared_s = None  # open again until this detector clears too
    if source not in hang.seen_by:
        hang.seen_by.append(source)


def _t(e: Mapping[str, Any]) -> float:
    return float(e.get("t") or 0.0)


def _merged(events: Iterable[Mapping[str, Any]]) -> list[Hang]:
    """The distinct hangs from the hang events alone, merged by ``same_hang``."""
    hangs: list[Hang] = []
    for e in sorted(events, key=_t):
        kind, t = e.get("kind"), _t(e)
        if kind in DETECTION_KINDS:
            since = silence_start(t, e.get("data"))
            source = str(e.get("source") or "unknown")
            last = hangs[-1] if hangs else None
            if last is not None and same_hang(since, last):
                merge(last, t, since, source)
            else:
                hangs.append(Hang(t, since, None, [source]))
        elif kind == "hang_cleared" and hangs:
            hangs[-1].cleared_s = t
    return hangs


def hangs_from_events(events: Iterable[Mapping[str, Any]]) -> list[Hang]:
    """The run's distinct hangs from its events (``hang_suspected``, ``hang_corroborated``,
    ``hang_cleared``), in order: the one count every output uses; each with how long the
    server's health checks timed out during it (``health_silent_s``)."""
    rows = list(events)
    hangs = _merged(rows)
    last_t = max((_t(e) for e in rows), default=0.0)
    for down in downs_from_events(rows):
        hang = freeze_of(down, hangs)
        if hang is not None:
            hang.health_silent_s = (hang.health_silent_s or 0.0) + down.seconds(last_t)
    return hangs


def downs_from_events(events: Sequence[Mapping[str, Any]]) -> list[Down]:
    """Each ``server_down`` with its ``server_back``, in order. The start is the back's
    ``down_s`` before it (the first failed check), else the ``server_down`` itself."""
    downs: list[Down] = []
    opened: tuple[int, float, str] | None = None
    for i in sorted(range(len(events)), key=lambda i: _t(events[i])):
        e = events[i]
        if e.get("kind") == "server_down" and opened is None:
            opened = (i, _t(e), str((e.get("data") or {}).get("reason") or ""))
        elif e.get("kind") == "server_back" and opened is not None:
            downs.append(back(Down(opened[1], None, opened[2], opened[0]), e))
            opened = None
    if opened is not None:
        downs.append(Down(opened[1], None, opened[2], opened[0]))
    return downs


def back(down: Down, e: Mapping[str, Any]) -> Down:
    """``down`` ended by the ``server_back`` ``e``: it began ``down_s`` before that."""
    t = _t(e)
    down_s = (e.get("data") or {}).get("down_s")
    start = (
        min(down.start_s, t - float(down_s)) if isinstance(down_s, int | float) else down.start_s
    )
    return Down(start, t, down.reason, down.event)


def in_freeze(down: Down, hang: Hang) -> bool:
    """Whether ``down`` is ``hang``'s frozen process seen from its health checks: they timed
    out, and the down period overlaps the hang (its silence to its clear, with the grace)."""
    if not down.timed_out:
        return False
    cleared = math.inf if hang.cleared_s is None else hang.cleared_s
    ended = math.inf if down.back_s is None else down.back_s
    return down.start_s <= cleared + MERGE_GRACE_S and ended >= hang.silent_since_s - MERGE_GRACE_S


def freeze_of(down: Down, hangs: Iterable[Hang]) -> Hang | None:
    """The hang ``down`` is part of (``in_freeze``), or None: then it is an outage."""
    return next((h for h in hangs if in_freeze(down, h)), None)


def freeze_downs(events: Sequence[Mapping[str, Any]]) -> set[int]:
    """The positions of the ``server_down`` events that are part of a hang, not outages."""
    hangs = _merged(events)
    return {
        d.event
        for d in downs_from_events(events)
        if d.event is not None and freeze_of(d, hangs) is not None
    }


def outage_count(events: Sequence[Mapping[str, Any]], server: Mapping[str, Any]) -> int:
    """How many times the server was down, as the verdict and ``summary.json`` say: its
    ``server_down`` events but those of a frozen process inside a hang (``in_freeze``), else
    (a run without them) the server collector's own ``down_events``."""
    downs = sum(1 for e in events if e.get("kind") == "server_down")
    if not downs:
        return int(server.get("down_events") or 0)
    return downs - len(freeze_downs(events))


def hang_count(events: Iterable[Mapping[str, Any]], server: Mapping[str, Any]) -> int:
    """How many hangs the run had, as the verdict, ``summary.json`` and the report say:
    the distinct hangs in the events, else (a run without hang events) the server
    collector's own count."""
    return len(hangs_from_events(events)) or int(server.get("hangs_suspected") or 0)
