"""Both hang detectors report through one gate: one hang, one ``hang_suspected``."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from stress.analysis.hangs import outage_count
from stress.core.events import RunEvent
from stress.live.hangs import FROZEN_KIND, GatedSink, HangGate
from stress.tui.verdict import judge
from tests.tui.data import snapshot


def ev(kind: str, source: str, t: float = 0.0) -> RunEvent:
    return RunEvent(t, kind, f"{kind} from {source}", "error", source=source)


def test_a_hang_seen_by_both_detectors_counts_once_and_keeps_both_sources() -> None:
    out: list[RunEvent] = []
    gate = HangGate(out.append)
    gate.event(ev("hang_suspected", "client", 1.0))
    gate.event(ev("hang_suspected", "server", 2.0))
    assert gate.hung
    gate.event(ev("hang_cleared", "client", 3.0))
    assert gate.hung  # the server collector still sees it
    gate.event(ev("hang_cleared", "server", 4.0))
    assert not gate.hung
    assert [(e.kind, e.source) for e in out] == [
        ("hang_suspected", "client"),
        ("hang_corroborated", "server"),
        ("hang_partly_cleared", "client"),
        ("hang_cleared", "server"),
    ]
    assert out[1].severity == "info" and out[1].data["same_hang_as"] == ["client"]
    assert out[2].data["still_seen_by"] == ["server"]
    # a later, separate hang is counted again
    gate.event(ev("hang_suspected", "server", 9.0))
    assert out[-1].kind == "hang_suspected"
    assert sum(e.kind == "hang_suspected" for e in out) == 2


def test_the_gated_sink_passes_everything_else_straight_on() -> None:
    events: list[RunEvent] = []
    lines: list[tuple[str, dict[str, object]]] = []

    class Sink:
        def write(self, stream: str, record: dict[str, object]) -> None:
            lines.append((stream, record))

        def event(self, e: RunEvent) -> None:
            events.append(e)

    sink = Sink()
    gated = GatedSink(sink, HangGate(sink.event))
    gated.write("server", {"x": 1})
    gated.event(ev("restart", "server"))
    gated.event(ev("hang_suspected", "server"))
    assert lines == [("server", {"x": 1})]
    assert [e.kind for e in events] == ["restart", "hang_suspected"]


def down(kind: str, t: float, **data: object) -> RunEvent:
    return RunEvent(t, kind, kind, "error", source="server", data=dict(data))


def freeze(reason: str, server_down_first: bool) -> list[RunEvent]:
    """A SIGSTOP as the gate sees it; the timed-out health checks may reach ``server_down``
    before the client's watch (default ``hang_after`` 60 s) or after it (a short one)."""
    d = down("server_down", 3.0, reason=reason, failed_scrapes=2)
    h = RunEvent(4.0, "hang_suspected", "h", "error", source="client", data={"silent_since_s": 1.0})
    return [
        *((d, h) if server_down_first else (h, d)),
        RunEvent(9.0, "hang_cleared", "c", "warning", source="client"),
        down("server_back", 9.5, down_s=7.0),
    ]


def badge(out: list[RunEvent]) -> tuple[str, ...]:
    snap = replace(
        snapshot(gpus=False),
        outcomes={"ok": 5, "error": 0, "empty": 0, "reasoning_only": 0, "truncated": 0},
        collectors={"server": {"restarts": 0, "up": True, "preemptions": 0}},
    )
    return judge(snap, Counter(e.kind for e in out), 0, 0).reasons


@pytest.mark.parametrize("server_down_first", [True, False])
def test_a_frozen_servers_down_is_written_as_part_of_the_hang_once(
    server_down_first: bool,
) -> None:
    out: list[RunEvent] = []
    gated = GatedSink(None, HangGate(out.append))
    for e in freeze("timeout", server_down_first):
        gated.event(e)
    frozen = [e for e in out if e.kind == FROZEN_KIND]
    assert len(frozen) == 1 and frozen[0].severity == "info", [e.kind for e in out]
    assert frozen[0].data == {
        "down_since_s": 3.0,
        "reason": "timeout",
        "hang_first_detected_s": 4.0,
    }
    assert [e.kind for e in out].count("server_down") == 1  # written as it came
    assert badge(out) == ("1 hang",)  # not "1 server outage" as well
    rows = [{"t": e.t, "kind": e.kind, "source": e.source, "data": e.data} for e in out]
    assert outage_count(rows, {}) == 0  # the verdict agrees


def test_a_refused_down_beside_a_hang_stays_an_outage() -> None:
    out: list[RunEvent] = []
    gated = GatedSink(None, HangGate(out.append))
    for e in freeze("cannot connect: Connection refused", True):
        gated.event(e)
    assert FROZEN_KIND not in [e.kind for e in out]
    assert badge(out) == ("1 hang", "1 server outage")
