"""ClientHealthCollector: lag probes, records, the overload warning, its cause, its rate limit.

Logic tests feed windows through ``ingest`` (no sleeping). The loop tests block the event
loop on purpose and only assert what a shared, busy machine cannot take away: a 200 ms
block is seen as at least 150 ms of lag. The starved-machine test fills every core with
child processes while the real collector samples, and checks the warning blames the
machine, not stress (which idles at a few % of a core).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from typing import Any

import orjson
import pytest

from stress.collectors.base import RunClock
from stress.collectors.client import ClientHealthCollector, MachineLoad
from stress.core.events import RunEvent

pytestmark = pytest.mark.timeout(20)


class ListSink:
    def __init__(self) -> None:
        self.records: list[tuple[str, dict[str, Any]]] = []
        self.events: list[RunEvent] = []

    def write(self, stream: str, record: dict[str, Any]) -> None:
        orjson.dumps(record)
        self.records.append((stream, record))

    def event(self, ev: RunEvent) -> None:
        self.events.append(ev)


def make(**kw: Any) -> tuple[ClientHealthCollector, ListSink]:
    sink = ListSink()
    return ClientHealthCollector(sink, RunClock.start(), 1.0, **kw), sink


def test_ingest_writes_record_and_live_view() -> None:
    c, sink = make()
    rec = c.ingest(1.0, [0.5, 1.0, 3.0], cpu_pct=42.0, rss_mib=80.25, open_fds=12)
    assert sink.records == [("client", rec)]
    assert rec["loop_lag_ms_p50"] == 1.0 and rec["loop_lag_ms_max"] == 3.0
    assert rec["probes"] == 3 and rec["open_fds"] == 12
    assert c.live() == {
        "loop_lag_ms_p50": 1.0,
        "loop_lag_ms_max": 3.0,
        "cpu_pct": 42.0,
        "rss_mib": 80.2,
        "machine_cpu_pct": None,
        "load1": None,
    }
    assert not sink.events


def test_warns_after_consecutive_high_samples_and_rate_limits() -> None:
    c, sink = make(lag_warn_ms=20, warn_after=3, warn_every_s=60)
    c.ingest(1, [50.0], 10, 50)
    c.ingest(2, [50.0], 10, 50)
    c.ingest(3, [1.0], 10, 50)  # the run of high samples is broken
    c.ingest(4, [50.0], 10, 50)
    c.ingest(5, [50.0], 10, 50)
    assert not sink.events
    c.ingest(6, [50.0], 10, 50)
    assert [e.kind for e in sink.events] == ["client_overloaded"]
    ev = sink.events[0]
    assert ev.severity == "warning" and ev.source == "client" and "distorted" in ev.message
    for t in range(7, 60):
        c.ingest(t, [50.0], 10, 50)
    assert len(sink.events) == 1  # rate-limited
    c.ingest(70, [50.0], 10, 50)
    assert len(sink.events) == 2
    s = c.summary()
    assert s["warnings"] == 2 and s["distorted"] and s["overloaded_samples"] == 59


def test_cpu_near_a_full_core_warns() -> None:
    c, sink = make(cpu_warn_pct=90, warn_after=2)
    c.ingest(1, [0.1], 97, 50)
    c.ingest(2, [0.1], 99, 50)
    assert [e.kind for e in sink.events] == ["client_overloaded"]


def test_summary_is_bounded_and_has_run_figures() -> None:
    c, _ = make()
    for t in range(200):
        c.ingest(t, [0.2] * 9 + [30.0], cpu_pct=20 + t % 5, rss_mib=60 + t / 100)
    s = c.summary()
    assert s["samples"] == 200 and s["probes"] == 2000
    assert 0.15 <= s["loop_lag_ms_p50"] <= 0.3
    assert 25 <= s["loop_lag_ms_p99"] <= 40 and s["loop_lag_ms_max"] == 30.0
    assert s["rss_mib_start"] == 60.0 and s["rss_mib_max"] == pytest.approx(61.99, abs=0.01)
    assert s["cpu_pct_max"] == 24.0
    assert len(c._hist) == 142  # the histogram does not grow with the run


def test_empty_summary() -> None:
    c, _ = make()
    s = c.summary()
    assert s["samples"] == 0 and s["loop_lag_ms_p50"] is None and not s["distorted"]


async def test_blocked_loop_is_seen_as_lag() -> None:
    sink = ListSink()
    c = ClientHealthCollector(sink, RunClock.start(), 0.2, probe_s=0.02)
    stop = asyncio.Event()
    task = asyncio.create_task(c.run(stop))
    await asyncio.sleep(0.1)
    time.sleep(0.2)  # block the loop on purpose
    await asyncio.sleep(0.3)
    stop.set()
    await asyncio.wait_for(task, 5)
    records = [r for s, r in sink.records if s == "client"]
    assert records, "at least one sample"
    assert max(r["loop_lag_ms_max"] for r in records) >= 150
    assert c.summary()["loop_lag_ms_max"] >= 150
    assert all(r["rss_mib"] > 0 for r in records)
    assert set(c.live()) >= {"loop_lag_ms_p50", "loop_lag_ms_max", "cpu_pct", "rss_mib"}
    assert all(0 <= r["machine_cpu_pct"] <= 100 for r in records)


async def test_stops_promptly_and_writes_a_last_sample() -> None:
    sink = ListSink()
    c = ClientHealthCollector(sink, RunClock.start(), 10.0)
    stop = asyncio.Event()
    task = asyncio.create_task(c.run(stop))
    await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(task, 2)  # one probe period at most, not the 10 s interval
    assert len(sink.records) == 1


async def test_a_broken_probe_is_an_event_not_an_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    sink = ListSink()
    c = ClientHealthCollector(sink, RunClock.start(), 0.05, probe_s=0.01)

    def boom() -> None:
        raise RuntimeError("no /proc")

    monkeypatch.setattr(c._proc, "memory_info", boom)
    await asyncio.wait_for(c.run(asyncio.Event()), 2)
    assert [e.kind for e in sink.events] == ["collector_error"]


IDLE_MACHINE = MachineLoad(busy_pct=20.0, steal_pct=0.0, load1=0.5, cores=2)


@pytest.mark.parametrize(
    ("cpu_pct", "machine", "cause", "says"),
    [
        # stress near a full core: its own doing, whatever the machine
        (97.0, IDLE_MACHINE, "stress", "stress itself is overloaded"),
        (97.0, MachineLoad(100.0, 0.0, 3.0, 2), "stress", "fewer users per stress process"),
        # stress at 3 % of a core, the machine full: the field report's case
        (3.0, MachineLoad(100.0, 0.0, 1.8, 2), "machine", "starved by other processes"),
        (3.0, MachineLoad(40.0, 0.0, 5.0, 2), "machine", "load 5.0"),  # run queue > cores
        (3.0, MachineLoad(60.0, 25.0, 1.0, 2), "machine", "steal 25 %"),  # a VM's host
        # the machine is full of stress alone (one core): stress, not the machine
        (85.0, MachineLoad(95.0, 0.0, 0.9, 1), "stress", "stress itself"),
        # lag, and little CPU anywhere: a blocking call
        (2.0, IDLE_MACHINE, "loop", "blocked while little CPU was used"),
        (2.0, MachineLoad(), "loop", "figures unknown"),
    ],
)
def test_the_warning_names_the_cause_and_its_evidence(
    cpu_pct: float, machine: MachineLoad, cause: str, says: str
) -> None:
    c, sink = make(lag_warn_ms=20, warn_after=2)
    for t in (1, 2):
        c.ingest(t, [80.0], cpu_pct, 50, machine=machine)
    (ev,) = sink.events
    assert ev.kind == "client_overloaded" and ev.data["cause"] == cause, ev.message
    assert says in ev.message and "80 ms" in ev.message
    assert f"{cpu_pct:.0f} % of a core" in ev.message
    s = c.summary()
    assert s["overload_cause"] == cause and s["overload_causes"] == {cause: 2}
    assert sink.records[-1][1]["machine_cpu_pct"] == machine.busy_pct


def _burn_every_core() -> list[subprocess.Popen[bytes]]:
    import psutil  # type: ignore[import-untyped]

    n = psutil.cpu_count() or 1
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    # wait until each child is spinning (start-up takes longer on a busy machine)
    children = [psutil.Process(p.pid) for p in procs]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(c.cpu_times().user > 0.1 for c in children):
        time.sleep(0.05)
    return procs


async def test_a_starved_machine_is_blamed_not_stress() -> None:
    """Every core busy in other processes, stress idle: the real collector says machine."""
    procs = _burn_every_core()
    try:
        sink = ListSink()
        # any lag counts as high, so that the sample's cause is always assessed
        c = ClientHealthCollector(
            sink, RunClock.start(), 0.5, probe_s=0.02, lag_warn_ms=0.0, warn_after=2
        )
        stop = asyncio.Event()
        task = asyncio.create_task(c.run(stop))
        await asyncio.sleep(1.6)  # three samples, the first one's window may include start-up
        stop.set()
        await asyncio.wait_for(task, 5)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
    warned = [e for e in sink.events if e.kind == "client_overloaded"]
    assert warned, sink.records
    ev = warned[0]
    assert ev.data["cause"] == "machine", ev.message
    assert "starved by other processes, not by stress" in ev.message
    assert ev.data["cpu_pct"] < 50 and ev.data["machine_cpu_pct"] >= 90, ev.data
    assert c.summary()["overload_cause"] == "machine"
