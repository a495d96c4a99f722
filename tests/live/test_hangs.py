"""Both hang detectors report through one gate: one hang, one ``hang_suspected``."""

from __future__ import annotations

from stress.core.events import RunEvent
from stress.live.hangs import GatedSink, HangGate


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
