"""NVIDIA cards through NVML (``nvidia-ml-py``), one guarded call at a time.

Consumer and datacenter boards differ in what they answer: GeForce cards lack ECC,
remapped rows and violation counters, passively cooled boards have no fan, pre-Volta
cards have no energy counter. Every call goes through ``_call``, which converts NVML's
units (mW, mJ, bytes, KB/s) at the call site's conversion, remembers per (card, call) that
a call is NotSupported / FunctionNotFound / NoPermission and never asks again, and turns
any other failure into a missing reading. The module is injectable so tests run without
a GPU.
"""

from __future__ import annotations

import contextlib
import queue
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stress.collectors.gpu.backend import BackendUnavailable
from stress.collectors.gpu.identity import normalize_bus_id
from stress.collectors.gpu.model import CardInfo, CardSample, HwEvent, ProcessInfo
from stress.collectors.gpu.xid import XID_CRITICAL, XidWatcher

# NVML return codes (stable C API values; the Python classes are generated from them).
NOT_SUPPORTED = 3
NO_PERMISSION = 4
DRIVER_NOT_LOADED = 9
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15

_SKIP_CODES = {
    NOT_SUPPORTED: "not supported",
    NO_PERMISSION: "no permission",
    FUNCTION_NOT_FOUND: "function not found in the driver",
}
#: A call failing this many times in a row for another reason is skipped from then on.
_MAX_FAILURES = 10

MIB = 1024 * 1024
FI_DEV_MEMORY_TEMP = 82
#: NVML's energy counter is an unsigned 64-bit count of mJ.
ENERGY_WRAP_J = float(2**64) / 1000.0

#: Telemetry item -> the call that provides it (for "which items this card supports").
ITEMS: dict[str, str] = {
    "power": "nvmlDeviceGetPowerUsage",
    "power_limit": "nvmlDeviceGetEnforcedPowerLimit",
    "energy_counter": "nvmlDeviceGetTotalEnergyConsumption",
    "temp": "nvmlDeviceGetTemperature",
    "temp_mem": "field:MEMORY_TEMP",
    "clocks": "nvmlDeviceGetClockInfo(sm)",
    "util": "nvmlDeviceGetUtilizationRates",
    "memory": "nvmlDeviceGetMemoryInfo",
    "throttle_reasons": "clock_event_reasons",
    "pcie_throughput": "nvmlDeviceGetPcieThroughput(tx)",
    "pcie_link": "nvmlDeviceGetCurrPcieLinkWidth",
    "fan": "nvmlDeviceGetFanSpeed",
    "ecc": "nvmlDeviceGetTotalEccErrors(unc,volatile)",
    "remapped_rows": "nvmlDeviceGetRemappedRows",
    "retired_pages": "nvmlDeviceGetRetiredPages(dbe)",
    "pcie_replay": "nvmlDeviceGetPcieReplayCounter",
    "processes": "nvmlDeviceGetComputeRunningProcesses",
    "xid_events": "nvmlDeviceGetSupportedEventTypes",
}


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


@dataclass(slots=True)
class _Card:
    key: str
    handle: Any
    info: CardInfo


@dataclass(slots=True)
class NvmlBackend:
    """The NVML backend. ``module`` is ``pynvml`` or a fake with the same names."""

    module: Any = None
    name: str = "nvml"
    event_timeout_ms: int = 500
    _cards: list[_Card] = field(default_factory=list)
    _skip: dict[tuple[str, str], str] = field(default_factory=dict)
    _failures: dict[tuple[str, str], int] = field(default_factory=dict)
    _events: queue.SimpleQueue[HwEvent] = field(default_factory=queue.SimpleQueue)
    _watcher: XidWatcher | None = None
    _lost: set[str] = field(default_factory=set)
    _initialised: bool = False

    # ---- setup -------------------------------------------------------------------------
    def open(self) -> list[CardInfo]:
        nv = self._load()
        try:
            nv.nvmlInit()
        except Exception as exc:
            raise BackendUnavailable(self._init_failure(exc)) from None
        self._initialised = True
        try:
            count = int(nv.nvmlDeviceGetCount())
        except Exception as exc:
            self.close()
            raise BackendUnavailable(f"NVML could not count GPUs: {exc}") from None
        if count == 0:
            self.close()
            raise BackendUnavailable("NVML found no NVIDIA GPU")
        driver = self._call("system", "nvmlSystemGetDriverVersion", conv=_text)
        for i in range(count):
            try:
                h = nv.nvmlDeviceGetHandleByIndex(i)
            except Exception:
                continue  # a card NVML cannot open (lost, or no permission) is left out
            uuid = self._call(f"index{i}", "nvmlDeviceGetUUID", h, conv=_text)
            pci = self._call(f"index{i}", "nvmlDeviceGetPciInfo", h)
            bus = normalize_bus_id(_text(pci.busId)) if pci is not None else None
            name = self._call(f"index{i}", "nvmlDeviceGetName", h, conv=_text) or "NVIDIA GPU"
            info = CardInfo(
                vendor="nvidia",
                backend=self.name,
                name=name,
                uuid=uuid,
                bus_id=bus,
                index=i,
                driver=driver,
            )
            card = _Card(info.key, h, info)
            self._cards.append(card)
            self._static(card)
        if not self._cards:
            self.close()
            raise BackendUnavailable("NVML could open none of its GPUs")
        # One reading decides which items each card supports.
        for s, card in zip(self.sample(0.0), self._cards, strict=True):
            card.info.mem_used_mib = s.mem_used_mib
            card.info.mem_total_mib = s.mem_total_mib
            card.info.power_limit_w = s.power_limit_w
            card.info.pcie_gen, card.info.pcie_width = s.pcie_gen, s.pcie_width
            card.info.processes = self.processes(card)
            card.info.supported, card.info.unsupported = self._items(card.key)
        return [c.info for c in self._cards]

    def _load(self) -> Any:
        if self.module is None:
            try:
                import pynvml
            except ImportError:
                raise BackendUnavailable("nvidia-ml-py (pynvml) is not installed") from None
            self.module = pynvml
        return self.module

    @staticmethod
    def _init_failure(exc: Exception) -> str:
        code = getattr(exc, "value", None)
        if code == LIBRARY_NOT_FOUND:
            return "no NVIDIA driver (NVML library not found)"
        if code == DRIVER_NOT_LOADED:
            return "NVIDIA driver not loaded"
        return f"NVML did not start: {exc}"

    def _static(self, card: _Card) -> None:
        nv, h, k, info = self.module, card.handle, card.key, card.info
        info.pcie_gen_max = self._call(k, "nvmlDeviceGetMaxPcieLinkGeneration", h, conv=int)
        info.pcie_width_max = self._call(k, "nvmlDeviceGetMaxPcieLinkWidth", h, conv=int)
        cc = self._call(k, "nvmlDeviceGetCudaComputeCapability", h)
        info.cuda_cc = (int(cc[0]), int(cc[1])) if cc is not None else None
        info.cuda_cores = self._call(k, "nvmlDeviceGetNumGpuCores", h, conv=int)
        info.max_sm_mhz = self._call(
            k, "nvmlDeviceGetMaxClockInfo", h, getattr(nv, "NVML_CLOCK_SM", 1), conv=int
        )
        events = self._call(k, "nvmlDeviceGetSupportedEventTypes", h, conv=int)
        if events is not None and not events & XID_CRITICAL:
            self._skip[(k, "nvmlDeviceGetSupportedEventTypes")] = "no Xid events"

    def _items(self, key: str) -> tuple[list[str], list[str]]:
        yes: list[str] = []
        no: list[str] = []
        for item, call in ITEMS.items():
            (no if (key, call) in self._skip else yes).append(item)
        return yes, no

    # ---- guarded calls -----------------------------------------------------------------
    def _call(
        self,
        key: str,
        fname: str,
        *args: Any,
        label: str | None = None,
        conv: Callable[[Any], Any] | None = None,
    ) -> Any:
        """Call ``module.<fname>(*args)``; ``None`` if unsupported or failing."""
        label = label or fname
        if (key, label) in self._skip or key in self._lost:
            return None
        fn = getattr(self.module, fname, None)
        if fn is None:
            self._skip[(key, label)] = "not in this nvidia-ml-py"
            return None
        try:
            value = fn(*args)
            self._failures.pop((key, label), None)
            return conv(value) if conv is not None else value
        except Exception as exc:
            code = getattr(exc, "value", None)
            if code in _SKIP_CODES:
                self._skip[(key, label)] = _SKIP_CODES[code]
            elif code == GPU_IS_LOST and key not in self._lost:
                self._lost.add(key)
                self._events.put(HwEvent(key, "gpu_lost", GPU_IS_LOST, "NVML: GPU is lost"))
            else:
                n = self._failures.get((key, label), 0) + 1
                self._failures[(key, label)] = n
                if n >= _MAX_FAILURES:
                    self._skip[(key, label)] = f"failing: {exc}"
            return None

    # ---- sampling ----------------------------------------------------------------------
    def sample(self, t: float) -> list[CardSample]:
        return [self._sample_card(c, t) for c in self._cards]

    def _sample_card(self, card: _Card, t: float) -> CardSample:
        nv, h, k = self.module, card.handle, card.key
        c = self._call
        s = CardSample(key=k, t=t)
        s.power_w = c(k, "nvmlDeviceGetPowerUsage", h, conv=lambda v: v / 1000.0)
        s.power_limit_w = c(k, "nvmlDeviceGetEnforcedPowerLimit", h, conv=lambda v: v / 1000.0)
        s.energy_counter_j = c(
            k, "nvmlDeviceGetTotalEnergyConsumption", h, conv=lambda v: v / 1000.0
        )
        s.energy_counter_wraps_at_j = ENERGY_WRAP_J
        s.temp_c = c(
            k, "nvmlDeviceGetTemperature", h, getattr(nv, "NVML_TEMPERATURE_GPU", 0), conv=float
        )
        s.temp_mem_c = self._memory_temp(card)
        s.sm_mhz = c(
            k,
            "nvmlDeviceGetClockInfo",
            h,
            getattr(nv, "NVML_CLOCK_SM", 1),
            label="nvmlDeviceGetClockInfo(sm)",
            conv=int,
        )
        s.mem_mhz = c(
            k,
            "nvmlDeviceGetClockInfo",
            h,
            getattr(nv, "NVML_CLOCK_MEM", 2),
            label="nvmlDeviceGetClockInfo(mem)",
            conv=int,
        )
        util = c(k, "nvmlDeviceGetUtilizationRates", h)
        if util is not None:
            s.util_gpu, s.util_mem = float(util.gpu), float(util.memory)
        # v2 reports `used` without the driver's reserved memory, as nvidia-smi does (v1
        # counted ~615 MiB "used" on an idle H200 where nvidia-smi said 0); v1 as fallback
        v2 = getattr(nv, "nvmlMemory_v2", None)
        mem = None
        if v2 is not None:
            mem = c(k, "nvmlDeviceGetMemoryInfo", h, v2, label="nvmlDeviceGetMemoryInfo_v2")
        if mem is None:
            mem = c(k, "nvmlDeviceGetMemoryInfo", h)
        if mem is not None:
            s.mem_used_mib, s.mem_total_mib = mem.used / MIB, mem.total / MIB
        s.throttle_mask = self._throttle(card)
        s.pcie_tx_kbs = c(
            k,
            "nvmlDeviceGetPcieThroughput",
            h,
            0,
            label="nvmlDeviceGetPcieThroughput(tx)",
            conv=int,
        )
        s.pcie_rx_kbs = c(
            k,
            "nvmlDeviceGetPcieThroughput",
            h,
            1,
            label="nvmlDeviceGetPcieThroughput(rx)",
            conv=int,
        )
        s.pcie_gen = c(k, "nvmlDeviceGetCurrPcieLinkGeneration", h, conv=int)
        s.pcie_width = c(k, "nvmlDeviceGetCurrPcieLinkWidth", h, conv=int)
        s.fan_pct = c(k, "nvmlDeviceGetFanSpeed", h, conv=float)
        s.error_counters = self._error_counters(card)
        return s

    def _memory_temp(self, card: _Card) -> float | None:
        """HBM/GDDR temperature from field value 82, where the board reports it."""
        label = "field:MEMORY_TEMP"
        vals = self._call(
            card.key, "nvmlDeviceGetFieldValues", card.handle, [FI_DEV_MEMORY_TEMP], label=label
        )
        if vals is None:
            return None
        try:
            v = vals[0]
            ret = int(v.nvmlReturn)
            if ret != 0:
                if ret in _SKIP_CODES:
                    self._skip[(card.key, label)] = _SKIP_CODES[ret]
                return None
            value = v.value
            # valueType 1 = unsigned int, 0 = double; a fake may give a plain number.
            raw = getattr(value, "uiVal", value) if int(v.valueType) != 0 else value.dVal
            temp = float(raw)
        except Exception:
            return None
        return temp if 0 < temp < 200 else None

    def _throttle(self, card: _Card) -> int | None:
        k, h = card.key, card.handle
        label = "clock_event_reasons"
        if (k, label) in self._skip:
            return None
        for fname in (
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetCurrentClocksThrottleReasons",
        ):
            if (k, fname) in self._skip:
                continue
            v = self._call(k, fname, h, conv=int)
            if v is not None:
                return int(v)
            if (k, fname) not in self._skip:
                return None  # a transient failure: try the same call next time
        self._skip[(k, label)] = "not supported"
        return None

    def _error_counters(self, card: _Card) -> dict[str, int]:
        k, h, c = card.key, card.handle, self._call
        out: dict[str, int] = {}
        unc = c(
            k,
            "nvmlDeviceGetTotalEccErrors",
            h,
            1,
            0,
            label="nvmlDeviceGetTotalEccErrors(unc,volatile)",
            conv=int,
        )
        if unc is not None:
            out["ecc_uncorrected"] = unc
        cor = c(
            k,
            "nvmlDeviceGetTotalEccErrors",
            h,
            0,
            0,
            label="nvmlDeviceGetTotalEccErrors(cor,volatile)",
            conv=int,
        )
        if cor is not None:
            out["ecc_corrected"] = cor
        rows = c(k, "nvmlDeviceGetRemappedRows", h)
        if rows is not None:
            corr, unc_rows, pending, failure = (int(x) for x in rows)
            out.update(
                remapped_rows_corrected=corr,
                remapped_rows_uncorrected=unc_rows,
                remap_pending=pending,
                remap_failure=failure,
            )
        dbe = c(
            k, "nvmlDeviceGetRetiredPages", h, 1, label="nvmlDeviceGetRetiredPages(dbe)", conv=len
        )
        if dbe is not None:
            out["retired_pages_dbe"] = dbe
        replay = c(k, "nvmlDeviceGetPcieReplayCounter", h, conv=int)
        if replay is not None:
            out["pcie_replay"] = replay
        return out

    def processes(self, card: _Card) -> list[ProcessInfo] | None:
        procs = self._call(card.key, "nvmlDeviceGetComputeRunningProcesses", card.handle)
        if procs is None:
            return None
        out = []
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            out.append(ProcessInfo(int(p.pid), None if used is None else used / MIB))
        return out

    # ---- events and teardown -----------------------------------------------------------
    def start_events(self) -> None:
        if self._watcher is not None or not self._cards:
            return
        handles = {c.key: c.handle for c in self._cards}
        self._watcher = XidWatcher(self.module, handles, self._events, self.event_timeout_ms)
        self._watcher.start()
        self._watcher.ready.wait(5.0)

    def drain_events(self) -> list[HwEvent]:
        out: list[HwEvent] = []
        while True:
            try:
                out.append(self._events.get_nowait())
            except queue.Empty:
                return out

    def unsupported(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for (key, call), why in sorted(self._skip.items()):
            out.setdefault(key, []).append(f"{call}: {why}")
        if self._watcher is not None:
            for key in self._watcher.unsupported:
                out.setdefault(key, []).append("xid events: not supported")
        return out

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
        if self._initialised:
            self._initialised = False
            with contextlib.suppress(Exception):
                self.module.nvmlShutdown()
