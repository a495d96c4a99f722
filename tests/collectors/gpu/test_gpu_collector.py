"""GpuCollector end to end with a fake NVML: records, events, flags, summary, robustness."""

from __future__ import annotations

import asyncio
import threading

from stress.collectors.base import RunClock
from stress.collectors.gpu.backend import BackendUnavailable
from stress.collectors.gpu.collector import GpuCollector
from stress.collectors.gpu.fake import UUID_A, UUID_B, FakeCard, FakeNvml, RecordingSink
from stress.collectors.gpu.model import CardInfo, CardSample, HwEvent
from stress.collectors.gpu.nvml import NvmlBackend

INTERVAL = 0.02


def make(sink: RecordingSink, cards: list[FakeCard], **kw: object) -> tuple[GpuCollector, FakeNvml]:
    nv = FakeNvml(cards)
    backend = NvmlBackend(nv, event_timeout_ms=10)
    col = GpuCollector(
        sink,
        RunClock.start(),
        INTERVAL,
        backends=[backend],
        idle_grace_s=0.06,
        **kw,  # type: ignore[arg-type]
    )
    return col, nv


async def run_for(col: GpuCollector, seconds: float, during: object = None) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(col.run(stop))
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.wait_for(task, timeout=5)


async def test_writes_header_and_samples(sink: RecordingSink, two_cards: list[FakeCard]) -> None:
    col, _ = make(sink, two_cards)
    await run_for(col, 0.2)
    header = [r for s, r in sink.records if r["type"] == "cards"]
    assert len(header) == 1 and [c["key"] for c in header[0]["cards"]] == [UUID_A, UUID_B]
    samples = sink.samples()
    assert len(samples) >= 5
    card = samples[-1]["cards"][0]
    assert card["key"] == UUID_A and card["power_w"] == 150.0 and card["power_limit_w"] == 700.0
    assert all(st == "gpu" for st, _ in sink.records)
    live = col.live()
    assert live["available"] is True
    assert set(live["cards"][0]) >= {
        "name",
        "util",
        "power_w",
        "power_limit_w",
        "temp_c",
        "sm_mhz",
        "mem_used_mib",
        "throttle",
        "energy_j",
        "flagged",
    }


async def test_xid_becomes_a_run_event_and_counts(
    sink: RecordingSink, two_cards: list[FakeCard]
) -> None:
    col, nv = make(sink, two_cards)
    stop = asyncio.Event()
    task = asyncio.create_task(col.run(stop))
    await asyncio.sleep(0.1)
    nv.push_xid(two_cards[1], 79)
    await asyncio.sleep(0.2)
    stop.set()
    await asyncio.wait_for(task, timeout=5)
    xids = [e for e in sink.events if e.kind == "xid"]
    assert len(xids) == 1
    assert xids[0].severity == "error" and xids[0].source == "gpu"
    assert xids[0].data["card"] == UUID_B and xids[0].data["code"] == 79
    assert "fallen off the bus" in xids[0].message
    summary = col.summary()
    assert summary["hw_errors"] == {"xid": 1}
    assert summary["hw_errors_total"] == 1


async def test_ecc_increment_is_an_error_event(
    sink: RecordingSink, two_cards: list[FakeCard]
) -> None:
    col, _ = make(sink, two_cards)
    stop = asyncio.Event()
    task = asyncio.create_task(col.run(stop))
    await asyncio.sleep(0.08)
    two_cards[0].ecc_unc = 2
    await asyncio.sleep(0.08)
    stop.set()
    await asyncio.wait_for(task, timeout=5)
    ecc = [e for e in sink.events if e.kind == "ecc"]
    assert len(ecc) == 1 and ecc[0].severity == "error"
    assert col.summary()["hw_errors"] == {"ecc": 2}


async def test_idle_card_is_flagged_while_others_work(sink: RecordingSink) -> None:
    cards = [
        FakeCard(UUID_A, "00000000:3B:00.0", util=95),
        FakeCard(UUID_B, "00000000:AF:00.0", util=0, power_mw=15_000),
    ]
    col, _ = make(sink, cards)
    await run_for(col, 0.3)
    idle = [e for e in sink.events if e.kind == "gpu_idle"]
    assert len(idle) == 1 and idle[0].data["card"] == UUID_B
    summary = col.summary()
    assert summary["cards"][1]["flagged_idle"] is True
    assert summary["cards"][0]["flagged_idle"] is False


async def test_no_flag_when_all_idle_or_card_not_in_selection(sink: RecordingSink) -> None:
    cards = [
        FakeCard(UUID_A, "00000000:3B:00.0", util=95),
        FakeCard(UUID_B, "00000000:AF:00.0", util=0),
    ]
    col, _ = make(sink, cards, selection=[UUID_A])
    await run_for(col, 0.25)
    assert "gpu_idle" not in sink.kinds()
    assert col.server_keys() == [UUID_A]
    assert col.summary()["server_cards"] == [UUID_A]


async def test_selection_mismatch_when_the_named_card_idles(sink: RecordingSink) -> None:
    cards = [
        FakeCard(UUID_A, "00000000:3B:00.0", util=0),
        FakeCard(UUID_B, "00000000:AF:00.0", util=90),
    ]
    col, _ = make(sink, cards, selection=["CUDA_DEVICE_ORDER=PCI_BUS_ID", "0"])
    await run_for(col, 0.3)
    assert col.server_keys() == [UUID_A]
    assert sink.kinds().count("gpu_selection_mismatch") == 1


async def test_summary_energy_per_token_and_power(sink: RecordingSink) -> None:
    card = FakeCard(UUID_A, "00000000:3B:00.0", power_mw=690_000, util=100, reasons=0x4)
    col, _ = make(sink, [card])
    stop = asyncio.Event()
    task = asyncio.create_task(col.run(stop))
    for _ in range(10):
        await asyncio.sleep(INTERVAL)
        card.energy_mj += 13_800  # 690 W for 20 ms
    stop.set()
    await asyncio.wait_for(task, timeout=5)
    s = col.summary(total_generated_tokens=1000)
    c = s["cards"][0]
    assert c["energy_source"] == "counter"
    assert s["energy_j"] == c["energy_j"] > 0
    assert s["j_per_token"] == round(s["energy_j"] / 1000, 6)
    assert c["power_max_w"] == 690.0 and c["power_limit_w"] == 700.0
    assert c["time_at_power_limit_s"] > 0
    assert c["throttle_s"]["sw_power_cap"] > 0
    assert col.summary()["j_per_token"] is None


async def test_host_bound_hint(sink: RecordingSink, monkeypatch: object) -> None:
    import stress.collectors.gpu.stats as stats

    monkeypatch.setattr(stats, "HOST_BOUND_MIN_S", 0.05)  # type: ignore[attr-defined]
    card = FakeCard(UUID_A, "00000000:3B:00.0", power_mw=135_000, limit_mw=180_000, util=97)
    col, _ = make(sink, [card])
    await run_for(col, 0.2)
    hint = col.summary()["host_bound_hint"]
    assert hint is not None and "135 W of 180 W" in hint


async def test_no_gpu_is_one_event_and_no_crash(sink: RecordingSink) -> None:
    col = GpuCollector(
        sink, RunClock.start(), INTERVAL, backends=[NvmlBackend(FakeNvml([], init_error=12))]
    )
    await run_for(col, 0.05)
    assert sink.kinds() == ["gpu_none"]
    assert "no NVIDIA driver" in sink.events[0].message
    assert col.summary() == {
        "available": False,
        "reason": "nvml: no NVIDIA driver (NVML library not found)",
    }
    assert col.live() == {"available": False, "cards": []}


class _BrokenBackend:
    """Opens fine, then every reading raises: the run must go on."""

    name = "broken"

    def __init__(self) -> None:
        self.threads: set[str] = set()

    def open(self) -> list[CardInfo]:
        self.threads.add(threading.current_thread().name)
        return [CardInfo("nvidia", "broken", "X", "GPU-x", "0000:01:00.0")]

    def sample(self, t: float) -> list[CardSample]:
        self.threads.add(threading.current_thread().name)
        raise RuntimeError("driver wedged")

    def start_events(self) -> None:
        return None

    def drain_events(self) -> list[HwEvent]:
        return []

    def unsupported(self) -> dict[str, list[str]]:
        return {}

    def close(self) -> None:
        return None


async def test_failing_backend_never_raises_and_stays_off_the_loop(sink: RecordingSink) -> None:
    b = _BrokenBackend()
    col = GpuCollector(sink, RunClock.start(), 0.005, backends=[b])
    await run_for(col, 0.2)
    assert "gpu_read_failed" in sink.kinds()
    assert "gpu_collector_failed" in sink.kinds()  # gave up after repeated failures
    assert threading.main_thread().name not in b.threads
    assert all(name.startswith("stress-gpu") for name in b.threads)


class _Unavailable:
    name = "nothing"

    def open(self) -> list[CardInfo]:
        raise BackendUnavailable("nothing here")

    def sample(self, t: float) -> list[CardSample]:
        return []

    def start_events(self) -> None:
        return None

    def drain_events(self) -> list[HwEvent]:
        return []

    def unsupported(self) -> dict[str, list[str]]:
        return {}

    def close(self) -> None:
        return None


async def test_second_backend_used_when_first_has_nothing(
    sink: RecordingSink, two_cards: list[FakeCard]
) -> None:
    col = GpuCollector(
        sink,
        RunClock.start(),
        INTERVAL,
        backends=[_Unavailable(), NvmlBackend(FakeNvml(two_cards))],
    )
    await run_for(col, 0.08)
    assert [c.key for c in col.cards] == [UUID_A, UUID_B]
    assert "nothing: nothing here" in col.summary()["notes"]
