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
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

MERGE_GRACE_S = 2.0
"""Slack on "the silence began before the previous hang cleared": the client's watch looks
once a second, so it clears up to a second late or early against the bytes, and the server
collector's last progress is up to one scrape interval before the freeze."""

DETECTION_KINDS = frozenset({"hang_suspected", "hang_corroborated"})
"""Events that say a detector sees a hang: the first of a hang, or another detector's."""


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

    def as_dict(self) -> dict[str, Any]:
        return {
            "first_detected_s": round(self.first_detected_s, 3),
            "silent_since_s": round(self.silent_since_s, 3),
            "cleared_s": None if self.cleared_s is None else round(self.cleared_s, 3),
            "seen_by": list(self.seen_by),
        }


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


def hangs_from_events(events: Iterable[Mapping[str, Any]]) -> list[Hang]:
    """The run's distinct hangs from its events (``hang_suspected``, ``hang_corroborated``,
    ``hang_cleared``), in order: the one count every output uses."""
    hangs: list[Hang] = []
    for e in sorted(events, key=lambda e: float(e.get("t") or 0.0)):
        kind, t = e.get("kind"), float(e.get("t") or 0.0)
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


def hang_count(events: Iterable[Mapping[str, Any]], server: Mapping[str, Any]) -> int:
    """How many hangs the run had, as the verdict, ``summary.json`` and the report say:
    the distinct hangs in the events, else (a run without hang events) the server
    collector's own count."""
    return len(hangs_from_events(events)) or int(server.get("hangs_suspected") or 0)
