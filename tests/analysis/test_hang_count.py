"""One freeze, one hang (issue 35): detections merged by the silence they saw."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stress.analysis.hangs import (
    MERGE_GRACE_S,
    freeze_downs,
    hang_count,
    hangs_from_events,
    outage_count,
)
from stress.analysis.judge import make_verdict
from stress.analysis.rundata import load_run
from stress.core.events import RunEvent
from stress.live.hangs import HangGate
from tests.report.synth import event, manifest, request, write_run


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


# a 90 s SIGSTOP: the client's watch sees it, the health checks time out (the kernel still
# accepts their connections), the collector says the server is back and sees the hang late
FROZEN = [
    row(60.0, "server_down", "server", reason="timeout", failed_scrapes=2),
    row(118.0, "hang_suspected", "client", silent_since_s=58.0),
    row(148.5, "hang_cleared", "client"),
    row(149.0, "server_back", "server", down_s=91.0),
    row(149.7, "hang_suspected", "server", stalled_s=91.5, silent_since_s=58.2),
    row(151.0, "hang_cleared", "server"),
]


def refused(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same run with the server dead, not frozen: its connections refused."""
    why = "cannot connect: Connection refused"
    return [
        {**r, "data": {**r["data"], "reason": why}} if r["kind"] == "server_down" else r
        for r in rows
    ]


def test_a_frozen_servers_timed_out_health_checks_are_its_hang_not_an_outage() -> None:
    assert hang_count(FROZEN, {}) == 1
    assert freeze_downs(FROZEN) == {0}
    assert outage_count(FROZEN, {"down_events": 1}) == 0
    (hang,) = hangs_from_events(FROZEN)
    assert hang.health_silent_s == 91.0 and hang.as_dict()["health_silent_s"] == 91.0


def test_a_refused_outage_or_a_timeout_without_a_hang_is_still_an_outage() -> None:
    dead = refused(FROZEN)
    assert hang_count(dead, {}) == 1 and outage_count(dead, {}) == 1
    assert hangs_from_events(dead)[0].health_silent_s is None
    slow = [r for r in FROZEN if r["kind"] in ("server_down", "server_back")]
    assert outage_count(slow, {}) == 1  # /health timed out, tokens flowed: an outage
    later = [*FROZEN, row(400.0, "server_down", "server", reason="timeout")]
    assert outage_count(later, {}) == 1  # long after the hang cleared: its own outage
    assert outage_count([], {"down_events": 2}) == 2  # a run without the events


def test_the_verdict_counts_the_freeze_as_one_hang_and_says_the_health_checks_stopped(
    tmp_path: Path,
) -> None:
    reqs = [request(i % 3, i // 3 + 1, float(i), cached=900, reusable=900) for i in range(30)]
    events = [event(r["kind"], r["t"], source=r["source"], **r["data"]) for r in FROZEN]
    v = make_verdict(load_run(write_run(tmp_path / "frozen", manifest(), reqs, events=events)))
    assert [f.short for f in v.findings if f.level == "FAIL"] == ["1 hang"]
    line = next(i for i in v.items if "suspected hangs" in i)
    assert "suspected hangs 1 (the server also stopped answering its health checks for 91 s" in (
        line
    )
    assert "server down 0 times" in line
    dead = [event(r["kind"], r["t"], source=r["source"], **r["data"]) for r in refused(FROZEN)]
    v = make_verdict(load_run(write_run(tmp_path / "dead", manifest(), reqs, events=dead)))
    assert [f.short for f in v.findings if f.level == "FAIL"] == ["1 hang", "1 server outage"]
