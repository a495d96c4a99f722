"""ClientHealthCollector: lag probes, records, the overload warning and its rate limit.

Logic tests feed windows through ``ingest`` (no sleeping). The loop tests block the event
loop on purpose and only assert what a shared, busy machine cannot take away: a 200 ms
block is seen as at least 150 ms of lag.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest

from stress.collectors.base import RunClock
from stress.collectors.client import ClientHealthCollector
from stress.events import RunEvent

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
    assert c._hist.size == 142  # the histogram does not grow with the run


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
    assert set(c.live()) == {"loop_lag_ms_p50", "loop_lag_ms_max", "cpu_pct", "rss_mib"}


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
