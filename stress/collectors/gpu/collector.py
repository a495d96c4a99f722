"""``GpuCollector``: samples every card once per interval during a run.

All backend calls (NVML, sysfs) run in one dedicated sampler thread, on fixed deadlines
set by the event loop; the loop only folds finished readings into bounded statistics,
writes the ``gpu`` stream and raises run events. If a reading is still running at the
next deadline, that tick is counted as missed instead of piling up threads. Nothing here
raises out of ``run``: a broken backend becomes a run event and the run goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stress.collectors.base import Collector, RunClock, Sink
from stress.collectors.gpu.aer import AerReader
from stress.collectors.gpu.backend import Backend, BackendUnavailable
from stress.collectors.gpu.health import EVENT_SEVERITY, classify
from stress.collectors.gpu.hwmon import HwmonBackend
from stress.collectors.gpu.identity import Selection, resolve_selection
from stress.collectors.gpu.model import CardInfo, CardSample, HwEvent
from stress.collectors.gpu.nvml import NvmlBackend
from stress.collectors.gpu.stats import CardStats
from stress.collectors.gpu.throttle import decode
from stress.core.events import RunEvent, Severity

#: A card counts as working at or above this utilisation (%), idle at or below IDLE_UTIL.
BUSY_UTIL = 30.0
IDLE_UTIL = 5.0
#: After this many consecutive failed readings the sampler gives up (with an event).
MAX_CONSECUTIVE_FAILURES = 10


def default_backends(sysfs_root: Path | str = "/") -> list[Backend]:
    return [NvmlBackend(), HwmonBackend(sysfs_root)]


@dataclass(slots=True)
class Opened:
    """What opening the backends found (built in the sampler thread)."""

    cards: list[CardInfo] = field(default_factory=list)
    backends: list[Backend] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    aer: dict[str, AerReader] = field(default_factory=dict)


def open_backends(backends: list[Backend], sysfs_root: Path | str, events: bool) -> Opened:
    """Open every backend that has cards; blocking, so call it off the event loop."""
    out = Opened()
    seen_bus: set[str] = set()
    for b in backends:
        try:
            cards = b.open()
        except BackendUnavailable as exc:
            out.notes.append(f"{b.name}: {exc}")
            continue
        except Exception as exc:  # a backend bug must not stop the run
            out.notes.append(f"{b.name}: failed to open: {type(exc).__name__}: {exc}")
            continue
        fresh = [c for c in cards if not c.bus_id or c.bus_id not in seen_bus]
        seen_bus.update(c.bus_id for c in fresh if c.bus_id)
        out.cards.extend(fresh)
        out.backends.append(b)
        if events:
            try:
                b.start_events()
            except Exception as exc:
                out.notes.append(f"{b.name}: no hardware events: {exc}")
    for c in out.cards:
        if c.bus_id and not c.simulated:  # a simulated card has no PCIe function
            reader = AerReader(sysfs_root, c.bus_id)
            if reader.available():
                out.aer[c.key] = reader
                c.supported.append("aer")
            else:
                c.unsupported.append("aer")
    if out.cards and not out.aer and not all(c.simulated for c in out.cards):
        out.notes.append("PCIe AER counters not readable (AER off, or no sysfs for the cards)")
    return out


class GpuCollector(Collector):
    """Per-card power, energy, clocks, throttling and hardware errors; see module doc."""

    name = "gpu"

    def __init__(
        self,
        sink: Sink,
        clock: RunClock,
        interval_s: float = 1.0,
        selection: list[str] | None = None,
        backends: list[Backend] | None = None,
        *,
        cuda_device_order: str | None = None,
        sysfs_root: Path | str = "/",
        idle_grace_s: float = 10.0,
        time_scale: float = 1.0,
    ) -> None:
        super().__init__(sink, clock, interval_s)
        self.time_scale = time_scale
        """Simulated seconds per wall second: a time-scaled simulator run's simulated cards
        are folded (energy, time at the limit, idle time) on the simulated clock, the one
        its report uses; the ``t`` of each record stays the run clock's, as for requests."""
        self.selection_spec = selection
        self.cuda_device_order = cuda_device_order
        self.sysfs_root = sysfs_root
        self.idle_grace_s = idle_grace_s
        self._backends = backends if backends is not None else default_backends(sysfs_root)
        self._opened = Opened()
        self._selection: Selection | None = None
        self._stats: dict[str, CardStats] = {}
        self._latest: dict[str, CardSample] = {}
        self._prev_errors: dict[str, dict[str, int]] = {}
        self._idle_streak: dict[str, float] = {}
        self._flagged: set[str] = set()
        self._mismatch_reported = False
        self._mismatch_streak = 0.0
        self._unsupported: dict[str, list[str]] = {}
        self._available = False
        self._unavailable_reason: str | None = None
        self._busy = False
        self.samples_taken = 0
        self.missed_ticks = 0
        self.read_failures = 0
        self._consecutive_failures = 0
        self._executor: ThreadPoolExecutor | None = None

    # ---- identity ----------------------------------------------------------------------
    @property
    def cards(self) -> list[CardInfo]:
        return list(self._opened.cards)

    def server_keys(self) -> list[str]:
        """The cards of the server under test: the selection, or every card."""
        if self._selection is not None:
            return list(self._selection.keys)
        return [c.key for c in self._opened.cards]

    # ---- the loop ----------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="stress-gpu")
        ex = self._executor
        try:
            try:
                self._opened = await loop.run_in_executor(
                    ex, open_backends, self._backends, self.sysfs_root, True
                )
            except Exception as exc:
                self._opened = Opened(notes=[f"GPU backends failed: {exc}"])
            if not self._opened.cards:
                self._unavailable_reason = "; ".join(self._opened.notes) or "no GPU found"
                self._event("gpu_none", f"no GPU telemetry: {self._unavailable_reason}")
                return
            self._available = True
            self._start_run_state()
            await self._loop(stop, loop, ex)
            # One reading at the end so energy covers the whole run.
            await self._read_once(loop, ex, final=True)
        except Exception as exc:  # the contract: never raise out of run
            self._event("gpu_collector_failed", f"GPU telemetry stopped: {exc}", "error")
        finally:
            await self._close(loop, ex)

    async def _loop(
        self, stop: asyncio.Event, loop: asyncio.AbstractEventLoop, ex: ThreadPoolExecutor
    ) -> None:
        deadline = self.clock.now()
        tasks: set[asyncio.Task[None]] = set()
        while not stop.is_set():
            delay = deadline - self.clock.now()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
                if stop.is_set():
                    break
            if self._consecutive_failures >= MAX_CONSECUTIVE_FAILURES:
                self._event(
                    "gpu_collector_failed",
                    f"GPU telemetry stopped after {self.read_failures} failed readings",
                    "error",
                )
                return
            if self._busy:
                self.missed_ticks += 1
            else:
                task = asyncio.create_task(self._read_once(loop, ex))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            deadline += self.interval_s
            now = self.clock.now()
            if deadline <= now:  # fell behind: skip the lost ticks, keep the phase
                lost = int((now - deadline) / self.interval_s) + 1
                self.missed_ticks += lost
                deadline += lost * self.interval_s
        if tasks:
            await asyncio.wait(tasks, timeout=max(5.0, 3 * self.interval_s))

    async def _read_once(
        self, loop: asyncio.AbstractEventLoop, ex: ThreadPoolExecutor, final: bool = False
    ) -> None:
        if self._busy:
            if not final:
                return
            for _ in range(50):  # let the running reading finish before the final one
                await asyncio.sleep(0.1)
                if not self._busy:
                    break
            else:
                return
        self._busy = True
        try:
            samples, events = await asyncio.wait_for(
                loop.run_in_executor(ex, self._read), timeout=max(10.0, 5 * self.interval_s)
            )
        except Exception as exc:
            self.read_failures += 1
            self._consecutive_failures += 1
            if self.read_failures == 1:
                self._event("gpu_read_failed", f"GPU reading failed: {exc}", "warning")
            return
        finally:
            self._busy = False
        self._consecutive_failures = 0
        self._process(samples, events)

    def _read(self) -> tuple[list[CardSample], list[HwEvent]]:
        """Sampler thread: one reading of every card plus pending hardware events."""
        samples: list[CardSample] = []
        events: list[HwEvent] = []
        for b in self._opened.backends:
            samples.extend(b.sample(self.clock.now()))
            events.extend(b.drain_events())
        for s in samples:
            reader = self._opened.aer.get(s.key)
            if reader is not None:
                s.error_counters.update(reader.counters())
        return samples, events

    async def _close(self, loop: asyncio.AbstractEventLoop, ex: ThreadPoolExecutor) -> None:
        def close_all() -> dict[str, list[str]]:
            unsupported: dict[str, list[str]] = {}
            for b in self._opened.backends:
                with contextlib.suppress(Exception):
                    for k, v in b.unsupported().items():
                        unsupported.setdefault(k, []).extend(v)
                with contextlib.suppress(Exception):
                    b.close()
            return unsupported

        with contextlib.suppress(Exception):
            self._unsupported = await asyncio.wait_for(
                loop.run_in_executor(ex, close_all), timeout=10.0
            )
        ex.shutdown(wait=False)

    # ---- folding readings in (event-loop thread, no blocking calls) --------------------
    def _start_run_state(self) -> None:
        cards = self._opened.cards
        self._selection = resolve_selection(self.selection_spec, cards, self.cuda_device_order)
        for c in cards:
            gap = max(3.0, 3 * self.interval_s) * self.time_scale
            self._stats[c.key] = CardStats(c.key, max_gap_s=gap)
        sel = self._selection
        if sel is not None:
            for note in sel.notes:
                self._event("gpu_selection", note, "warning")
            if not sel.keys:
                self._event(
                    "gpu_selection",
                    f"the GPU selection {self.selection_spec} names none of the cards found; "
                    "all cards are measured and energy per token uses all of them",
                    "warning",
                )
                self._selection = None
        self.sink.write(
            "gpu",
            {
                "t": round(self.clock.now(), 6),
                "type": "cards",
                "cards": [c.as_dict() for c in cards],
                "server_cards": self.server_keys(),
                "selection": self.selection_spec,
                "notes": list(self._opened.notes),
            },
        )
        for c in cards:
            if c.link_degraded():
                self._event(
                    "pcie_link_degraded",
                    f"{self._label(c.key)}: PCIe link x{c.pcie_width} of x{c.pcie_width_max}",
                    "warning",
                )

    def _process(self, samples: list[CardSample], events: list[HwEvent]) -> None:
        self.samples_taken += 1
        record_cards: list[dict[str, Any]] = []
        weights: dict[str, float] = {}
        for s in samples:
            st = self._stats.get(s.key)
            if st is None:
                continue
            scaled = (
                s if self.time_scale == 1.0 else dataclasses.replace(s, t=s.t * self.time_scale)
            )
            weights[s.key] = st.add(scaled)
            self._latest[s.key] = s
            self._check_counters(s, st)
            record_cards.append(self._record(s, st))
        for ev in events:
            self._hw_event(ev)
        self._check_idle(weights)
        t = samples[0].t if samples else self.clock.now()
        self.sink.write("gpu", {"t": round(t, 6), "type": "sample", "cards": record_cards})

    def _record(self, s: CardSample, st: CardStats) -> dict[str, Any]:
        rec: dict[str, Any] = {
            "key": s.key,
            "t": round(s.t, 6),
            "power_w": s.power_w,
            "power_limit_w": s.power_limit_w,
            "energy_j": round(st.energy.total_j, 3),
            "energy_src": st.energy.source,
            "temp_c": s.temp_c,
            "temp_mem_c": s.temp_mem_c,
            "sm_mhz": s.sm_mhz,
            "mem_mhz": s.mem_mhz,
            "util_gpu": s.util_gpu,
            "util_mem": s.util_mem,
            "mem_used_mib": None if s.mem_used_mib is None else round(s.mem_used_mib, 1),
            "throttle": decode(s.throttle_mask),
            "throttle_mask": s.throttle_mask,
            "pcie_tx_kbs": s.pcie_tx_kbs,
            "pcie_rx_kbs": s.pcie_rx_kbs,
            "pcie_gen": s.pcie_gen,
            "pcie_width": s.pcie_width,
            "fan_pct": s.fan_pct,
            "fan_rpm": s.fan_rpm,
        }
        rec.update(s.extra)
        return {k: v for k, v in rec.items() if v is not None}

    def _check_counters(self, s: CardSample, st: CardStats) -> None:
        prev = self._prev_errors.setdefault(s.key, {})
        for name, value in s.error_counters.items():
            st.errors_first.setdefault(name, value)
            st.errors_last[name] = value
            before = prev.get(name)
            prev[name] = value
            if before is None or value <= before:
                continue
            ck = classify(name)
            st.count_event(ck.kind, value - before)
            self._event(
                ck.kind,
                f"{self._label(s.key)}: {name} rose {before} -> {value}",
                ck.severity,
                {
                    "card": s.key,
                    "counter": name,
                    "before": before,
                    "after": value,
                    "in_verdict": ck.in_verdict,
                },
            )

    def _hw_event(self, ev: HwEvent) -> None:
        severity, in_verdict = EVENT_SEVERITY.get(ev.kind, ("warning", False))
        st = self._stats.get(ev.key)
        if st is not None:
            st.count_event(ev.kind)
        self._event(
            ev.kind,
            f"{self._label(ev.key)}: {ev.message}",
            severity,
            {"card": ev.key, "code": ev.code, "in_verdict": in_verdict},
        )

    def _check_idle(self, weights: dict[str, float]) -> None:
        """Flag a server card that idles while another works (the wrong-card trap)."""
        peers = [k for k in self.server_keys() if k in self._latest]
        busy = {k for k in self._latest if self._is_busy(self._latest[k])}
        for k in peers:
            others_busy = any(o in busy for o in peers if o != k)
            if others_busy and self._is_idle(self._latest[k]):
                self._idle_streak[k] = self._idle_streak.get(k, 0.0) + weights.get(k, 0.0)
            else:
                self._idle_streak[k] = 0.0
                self._flagged.discard(k)
            if self._idle_streak[k] >= self.idle_grace_s:
                self._stats[k].idle_flagged_s += weights.get(k, 0.0)
                if k not in self._flagged:
                    self._flagged.add(k)
                    self._stats[k].flagged_ever = True
                    self._event(
                        "gpu_idle",
                        f"{self._label(k)} idles while the other cards of the server work "
                        "(wrong card, or a card the server does not use?)",
                        "warning",
                        {"card": k},
                    )
        if self._selection is None or self._mismatch_reported:
            return
        outsiders = [k for k in busy if k not in peers]
        if outsiders and peers and not any(k in busy for k in peers):
            self._mismatch_streak += max(weights.values(), default=0.0)
            if self._mismatch_streak >= self.idle_grace_s:
                self._mismatch_reported = True
                names = ", ".join(self._label(k) for k in outsiders)
                self._event(
                    "gpu_selection_mismatch",
                    f"{names} work while the cards named for the server idle: check the "
                    "GPU selection / CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER",
                    "warning",
                    {"busy": outsiders},
                )
        else:
            self._mismatch_streak = 0.0

    @staticmethod
    def _is_busy(s: CardSample) -> bool:
        if s.util_gpu is not None:
            return s.util_gpu >= BUSY_UTIL
        if s.power_w is not None and s.power_limit_w:
            return s.power_w >= 0.5 * s.power_limit_w
        return False

    @staticmethod
    def _is_idle(s: CardSample) -> bool:
        if s.util_gpu is not None:
            return s.util_gpu <= IDLE_UTIL
        if s.power_w is not None and s.power_limit_w:
            return s.power_w < 0.2 * s.power_limit_w
        return False

    def _label(self, key: str) -> str:
        for c in self._opened.cards:
            if c.key == key:
                return f"{c.name} [{c.bus_id or key}]"
        return key

    def _event(
        self,
        kind: str,
        message: str,
        severity: Severity = "info",
        data: dict[str, Any] | None = None,
    ) -> None:
        self.sink.event(
            RunEvent(self.clock.now(), kind, message, severity, source="gpu", data=data or {})
        )

    # ---- views -------------------------------------------------------------------------
    def live(self) -> dict[str, Any]:
        cards = []
        server = set(self.server_keys())
        for c in self._opened.cards:
            s = self._latest.get(c.key)
            st = self._stats.get(c.key)
            cards.append(
                {
                    "key": c.key,
                    "name": c.name,
                    "bus_id": c.bus_id,
                    "server": c.key in server,
                    "simulated": c.simulated,
                    "util": None if s is None else s.util_gpu,
                    "power_w": None if s is None else s.power_w,
                    "power_limit_w": None if s is None else s.power_limit_w,
                    "temp_c": None if s is None else s.temp_c,
                    "sm_mhz": None if s is None else s.sm_mhz,
                    "mem_used_mib": None
                    if s is None or s.mem_used_mib is None
                    else round(s.mem_used_mib),
                    "throttle": [] if s is None else decode(s.throttle_mask),
                    "energy_j": None if st is None else round(st.energy.total_j, 1),
                    "flagged": c.key in self._flagged,
                }
            )
        return {"available": self._available, "cards": cards}

    def summary(self, total_generated_tokens: int | None = None) -> dict[str, Any]:
        """Run figures; pass the run's generated-token total to get J/token."""
        if not self._available:
            return {"available": False, "reason": self._unavailable_reason or "not started"}
        server = self.server_keys()
        cards = []
        for c in self._opened.cards:
            st = self._stats[c.key]
            d: dict[str, Any] = {
                "key": c.key,
                "name": c.name,
                "bus_id": c.bus_id,
                "server": c.key in server,
            }
            if c.simulated:
                d["simulated"] = True
            d.update(st.as_dict())
            d["unsupported"] = self._unsupported.get(c.key, [])
            cards.append(d)
        server_stats = [self._stats[k] for k in server if k in self._stats]
        energy = sum(st.energy.total_j for st in server_stats)
        counts: dict[str, int] = {}
        for st in self._stats.values():
            for kind, n in st.events.items():
                counts[kind] = counts.get(kind, 0) + n
        verdict_kinds = {"xid", "ecc", "aer", "ecc_dbe", "gpu_unavailable", "gpu_lost"}
        host_bound = [st for st in server_stats if st.host_bound]
        hint = None
        if host_bound:
            parts = ", ".join(
                f"{self._label(st.key)} {st.loaded_power_max_w:.0f} W of {st.power_limit_w:.0f} W"
                for st in host_bound
            )
            hint = (
                f"host-bound: under load the cards never came near their power limit ({parts});"
                " the host side (CPU, scheduling, eager mode) is likely the bottleneck"
            )
        tokens = total_generated_tokens
        return {
            "available": True,
            "simulated": any(c.simulated for c in self._opened.cards),
            "cards": cards,
            "server_cards": server,
            "energy_j": round(energy, 3),
            "tokens": tokens,
            "j_per_token": round(energy / tokens, 6) if tokens else None,
            "energy_sources": sorted({st.energy.source for st in server_stats}),
            "hw_errors": {k: v for k, v in sorted(counts.items()) if k in verdict_kinds},
            "hw_errors_total": sum(v for k, v in counts.items() if k in verdict_kinds),
            "warnings": {k: v for k, v in sorted(counts.items()) if k not in verdict_kinds},
            "host_bound_hint": hint,
            "samples": self.samples_taken,
            "missed_ticks": self.missed_ticks,
            "read_failures": self.read_failures,
            "notes": list(self._opened.notes)
            + (list(self._selection.notes) if self._selection else []),
        }
