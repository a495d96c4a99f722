"""A fake ``pynvml`` module for tests and demos without a GPU (like httpx's MockTransport).

CI has no GPU, and the lead's run-wiring tests need cards that draw power, throttle and
raise Xids on cue. ``FakeNvml`` answers the subset of nvidia-ml-py that ``NvmlBackend``
and ``XidWatcher`` call, in NVML's own units (mW, mJ, bytes), counts every call per
(card, function) so tests can prove a NotSupported call is asked only once, and delivers
queued events to ``nvmlEventSetWait``.
"""

from __future__ import annotations

import queue
from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from stress.core.events import RunEvent

#: Two UUIDs in NVML's format for fakes; the first is a real H200's (see tests/fixtures).
UUID_A = "GPU-ab3e6a2a-37db-f115-8fb5-6ecccde9a863"
UUID_B = "GPU-11112222-3333-4444-5555-666677778888"


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass
class FakeCard:
    uuid: str
    bus: str
    name: str = "NVIDIA H200"
    power_mw: int = 150_000
    limit_mw: int = 700_000
    energy_mj: int = 1_000_000
    temp: int = 40
    mem_temp: int | None = 45
    util: int = 50
    sm: int = 1980
    reasons: int = 0
    cc: tuple[int, int] = (9, 0)
    cores: int = 16896
    max_sm: int = 1980
    mem_used: int = 1024 * 1024 * 1024
    ecc_unc: int = 0
    events_mask: int = 0xFF9F
    unsupported: set[str] = field(default_factory=set)
    procs: list[Any] = field(default_factory=list)


class FakeNvml:
    """Just enough of pynvml's surface, with per-(card, function) call counts."""

    NVML_TEMPERATURE_GPU = 0
    nvmlMemory_v2 = 0x02000028
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2

    def __init__(self, cards: list[FakeCard], init_error: int | None = None) -> None:
        self.cards = cards
        self.init_error = init_error
        self.calls: Counter[tuple[str, str]] = Counter()
        self.events: queue.Queue[Any] = queue.Queue()
        self.shutdowns = 0
        self.registered: list[str] = []

    def _enter(self, fname: str, card: FakeCard) -> None:
        self.calls[(card.uuid, fname)] += 1
        if fname in card.unsupported:
            raise FakeNVMLError(3)

    # setup
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise FakeNVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.cards)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeCard:
        return self.cards[i]

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.159.04"

    def nvmlDeviceGetUUID(self, c: FakeCard) -> str:
        return c.uuid

    def nvmlDeviceGetPciInfo(self, c: FakeCard) -> Any:
        return SimpleNamespace(busId=c.bus.encode())

    def nvmlDeviceGetName(self, c: FakeCard) -> str:
        return c.name

    def nvmlDeviceGetCudaComputeCapability(self, c: FakeCard) -> tuple[int, int]:
        return c.cc

    def nvmlDeviceGetNumGpuCores(self, c: FakeCard) -> int:
        return c.cores

    def nvmlDeviceGetMaxClockInfo(self, c: FakeCard, _t: int) -> int:
        return c.max_sm

    def nvmlDeviceGetMaxPcieLinkGeneration(self, c: FakeCard) -> int:
        return 5

    def nvmlDeviceGetMaxPcieLinkWidth(self, c: FakeCard) -> int:
        return 16

    # readings
    def nvmlDeviceGetPowerUsage(self, c: FakeCard) -> int:
        self._enter("nvmlDeviceGetPowerUsage", c)
        return c.power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, c: FakeCard) -> int:
        return c.limit_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, c: FakeCard) -> int:
        self._enter("nvmlDeviceGetTotalEnergyConsumption", c)
        return c.energy_mj

    def nvmlDeviceGetTemperature(self, c: FakeCard, _s: int) -> int:
        return c.temp

    def nvmlDeviceGetFieldValues(self, c: FakeCard, ids: list[int]) -> list[Any]:
        self._enter("nvmlDeviceGetFieldValues", c)
        ret = 0 if c.mem_temp is not None else 3
        value = SimpleNamespace(uiVal=c.mem_temp or 0, dVal=0.0)
        return [SimpleNamespace(nvmlReturn=ret, valueType=1, value=value)]

    def nvmlDeviceGetClockInfo(self, c: FakeCard, t: int) -> int:
        return c.sm if t == 1 else 3201

    def nvmlDeviceGetUtilizationRates(self, c: FakeCard) -> Any:
        return SimpleNamespace(gpu=c.util, memory=c.util // 2)

    def nvmlDeviceGetMemoryInfo(self, c: FakeCard, version: int | None = None) -> Any:
        # like the real driver: v1 `used` includes ~615 MiB the driver reserves
        reserved = 0 if version else 615 * 1024 * 1024
        return SimpleNamespace(used=c.mem_used + reserved, total=143_771 * 1024 * 1024, free=0)

    def nvmlDeviceGetCurrentClocksEventReasons(self, c: FakeCard) -> int:
        self._enter("nvmlDeviceGetCurrentClocksEventReasons", c)
        return c.reasons

    def nvmlDeviceGetPcieThroughput(self, c: FakeCard, counter: int) -> int:
        return 2124 if counter == 0 else 100

    def nvmlDeviceGetCurrPcieLinkGeneration(self, c: FakeCard) -> int:
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, c: FakeCard) -> int:
        return 16

    def nvmlDeviceGetFanSpeed(self, c: FakeCard) -> int:
        self._enter("nvmlDeviceGetFanSpeed", c)
        return 30

    def nvmlDeviceGetTotalEccErrors(self, c: FakeCard, etype: int, _ctype: int) -> int:
        self._enter("nvmlDeviceGetTotalEccErrors", c)
        return c.ecc_unc if etype == 1 else 0

    def nvmlDeviceGetRemappedRows(self, c: FakeCard) -> tuple[int, int, int, int]:
        self._enter("nvmlDeviceGetRemappedRows", c)
        return (0, 0, 0, 0)

    def nvmlDeviceGetRetiredPages(self, c: FakeCard, _cause: int) -> list[int]:
        self._enter("nvmlDeviceGetRetiredPages", c)
        return []

    def nvmlDeviceGetPcieReplayCounter(self, c: FakeCard) -> int:
        return 0

    def nvmlDeviceGetComputeRunningProcesses(self, c: FakeCard) -> list[Any]:
        self._enter("nvmlDeviceGetComputeRunningProcesses", c)
        return c.procs

    # events
    def nvmlDeviceGetSupportedEventTypes(self, c: FakeCard) -> int:
        return c.events_mask

    def nvmlEventSetCreate(self) -> str:
        return "es"

    def nvmlDeviceRegisterEvents(self, c: FakeCard, mask: int, _es: str) -> None:
        self.registered.append(c.uuid)

    def nvmlEventSetWait(self, _es: str, timeout_ms: int) -> Any:
        try:
            return self.events.get(timeout=timeout_ms / 1000.0)
        except queue.Empty:
            raise FakeNVMLError(10) from None

    def nvmlEventSetFree(self, _es: str) -> None:
        return None

    def push_xid(self, card: FakeCard, xid: int) -> None:
        """Deliver an Xid for ``card`` to the next ``nvmlEventSetWait``."""
        self.events.put(SimpleNamespace(device=card, eventType=0x8, eventData=xid))


class RecordingSink:
    """A ``Sink`` that keeps everything in memory."""

    def __init__(self) -> None:
        self.records: list[tuple[str, dict[str, Any]]] = []
        self.events: list[RunEvent] = []

    def write(self, stream: str, record: dict[str, Any]) -> None:
        self.records.append((stream, record))

    def event(self, ev: RunEvent) -> None:
        self.events.append(ev)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]

    def samples(self) -> list[dict[str, Any]]:
        return [r for s, r in self.records if s == "gpu" and r.get("type") == "sample"]
