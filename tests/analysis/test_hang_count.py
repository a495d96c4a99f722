"""One freeze, one hang (issue 35): detections merged by the silence they saw."""

from __future__ import annotations

from typing import Any

from stress.analysis.hangs import MERGE_GRACE_S, hang_count, hangs_from_events
from stress.core.events import RunEvent
from stress.live.hangs import HangGate


def row(t: float, kind: str, source: str, **data: Any) -> dict[str, Any]:
    return {"t": t, "kind": kind, "source": source, "message": kind, "data": data}


# issue 35 as an older run recorded it: a 90 s freeze (client at 58 s, the server 0.7 s
# after the recovery), then a 60 s freeze the server alone saw, late
ISSUE_35 = [
    row(158.0, "hang_suspected", "client"),
    row(190.0, "hang_cleared", "client"),
    row(190.7, "hang_suspected", "server", stalled_s=91.0),
    row(192.0, "hang_cleared", "server"),
    row(400.5, "hang_suspected", "server", stalled_s=61.0),
    row(402.0, "hang_cleared", "server"),
]


def test_two_freezes_recorded_as_three_detections_count_two_keeping_the_first() -> None:
    hangs = hangs_from_events(ISSUE_35)
    assert hang_count(ISSUE_35, {"hangs_suspected": 2}) == len(hangs) == 2
    assert hangs[0].first_detected_s == 158.0  # the client's, not the server's late one
    assert hangs[0].silent_since_s == 190.7 - 91.0
    assert hangs[0].seen_by == ["client", "server"] and hangs[0].cleared_s == 192.0
    assert hangs[1].seen_by == ["server"] and hangs[1].first_detected_s == 400.5


def test_a_detection_whose_silence_began_after_the_clear_is_a_new_hang() -> None:
    gap = MERGE_GRACE_S + 0.5
    events = [
        row(10.0, "hang_suspected", "client", silent_since_s=8.0),
        row(12.0, "hang_cleared", "client"),
        row(12.0 + gap + 2.0, "hang_suspected", "server", silent_since_s=12.0 + gap),
    ]
    assert len(hangs_from_events(events)) == 2


def ev(t: float, kind: str, source: str, **data: Any) -> RunEvent:
    return RunEvent(t, kind, kind, "error", source=source, data=data)


def test_the_gate_writes_a_late_detection_as_the_same_hang() -> None:
    out: list[RunEvent] = []
    gate = HangGate(out.append)
    gate.event(ev(158.0, "hang_suspected", "client", silent_since_s=100.0))
    gate.event(ev(190.0, "hang_cleared", "client"))
    gate.event(ev(190.7, "hang_suspected", "server", stalled_s=91.0, silent_since_s=99.7))
    gate.event(ev(192.0, "hang_cleared", "server"))
    assert [(e.kind, e.source) for e in out] == [
        ("hang_suspected", "client"),
        ("hang_cleared", "client"),
        ("hang_corroborated", "server"),
        ("hang_cleared", "server"),
    ]
    late = out[2]
    assert late.severity == "info" and late.data["late"] is True
    assert late.data["same_hang_as"] == ["client"] and late.data["first_detected_s"] == 158.0
    rows = [{"t": e.t, "kind": e.kind, "source": e.source, "data": e.data} for e in out]
    assert len(hangs_from_events(rows)) == 1  # what the gate wrote counts the same
