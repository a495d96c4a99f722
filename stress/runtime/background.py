"""The tasks that run beside the load: the flusher, the collectors, the hang watch and the
GPU pre-flight's late answer.

Each is started by the run (``stress.runtime.run``) once its files and clock exist and ends
when the run sets its ``stop`` event; none of them may end the run by raising: a failure is
an event in the record.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stress.collectors.base import Collector, RunClock
from stress.config.scenario import LoadedScenario
from stress.core.events import EventKind, RunEvent, Severity
from stress.live.hangs import GatedSink, HangGate
from stress.live.state import Live
from stress.net.fetch import Fetcher
from stress.runtime.target import Target
from stress.store.recorder import Recorder

GPU_OPEN_WAIT_S = 1.0
"""The GPU collector opens its cards once the run's first request is written, or this long
after the run clock started at the latest: opening them (pynvml's import, NVML's start and
the cards' handles, in the collector's thread) holds the interpreter in bursts, and delayed
the first request by 59-77 ms in 3 of 4 pinned starts on the H200 host (issue 15).
Its readings, energy included, start then: 150 ms or so after the run clock there either
way, as opening takes that long."""


def make_collectors(
    loaded: LoadedScenario,
    recorder: Recorder,
    clock: RunClock,
    session: Fetcher,
    target: Target,
    server_kind: str,
    gate: HangGate,
) -> list[Collector]:
    """The collectors this scenario asks for: the client's own health, server metrics, GPUs."""
    from stress.collectors.client import ClientHealthCollector
    from stress.collectors.gpu import Backend, GpuCollector
    from stress.collectors.server import ServerCollector

    tele = loaded.scenario.telemetry
    out: list[Collector] = [ClientHealthCollector(recorder, clock, tele.interval)]
    if tele.server_metrics:
        out.append(
            ServerCollector(
                GatedSink(recorder, gate),  # its hangs and the client's are one count
                clock,
                tele.interval,
                session=session,
                base_url=target.url,
                headers=target.headers,
                kind=server_kind,
                hang_after_s=tele.hang_after,
            )
        )
    if tele.gpus != "off":
        selection = None if tele.gpus == "auto" else list(tele.gpus)
        backends: list[Backend] | None = None  # real cards: NVML, hwmon
        if target.sim is not None:  # the simulator's simulated cards only, never real ones
            from stress.collectors.gpu.simulated import SimGpuBackend

            backends = [SimGpuBackend(target.url)]
        gpu = GpuCollector(
            recorder, clock, tele.interval, selection, backends, time_scale=target.time_scale
        )
        out.append(gpu)
    return out


async def flusher(recorder: Recorder, stop: asyncio.Event, on_failure: Callable[[], None]) -> None:
    """Flush once a second; a write that fails (the recorder keeps the lines and shows a
    ``recorder_failed`` event) stops the run: no new turns, requests in flight finish."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=1.0)
        if not recorder.flush():
            on_failure()


LATE_GPU_WAIT_S = 10.0
"""How long the end of a run waits for a GPU pre-flight that has not answered yet."""


async def late_gpu(
    gpu: asyncio.Future[dict[str, Any]],
    stop: asyncio.Event,
    found: Callable[[dict[str, Any]], None],
) -> None:
    """Hand the GPU pre-flight's answer to ``found`` when it comes; at the run's end wait
    for it at most ``LATE_GPU_WAIT_S`` more, then say it did not answer."""
    stopped: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
    either: set[asyncio.Future[Any]] = {gpu, stopped}
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if not gpu.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(gpu), LATE_GPU_WAIT_S)
    finally:
        stopped.cancel()
    answer = gpu_answer(gpu)
    found(
        answer
        if answer is not None
        else {"summary": "GPU discovery had not answered when the run ended"}
    )


def gpu_answer(gpu: asyncio.Future[dict[str, Any]]) -> dict[str, Any] | None:
    """The GPU pre-flight's answer, if it has given one."""
    if gpu.done() and not gpu.cancelled() and gpu.exception() is None:
        return gpu.result()
    return None


async def run_collector(
    c: Collector,
    recorder: Recorder,
    clock: RunClock,
    stop: asyncio.Event,
    after: asyncio.Event | None = None,
) -> None:
    """A collector's task; one that dies says so (``collector_failed``) instead of vanishing.
    With ``after``, it starts once that is set (or ``stop``), ``GPU_OPEN_WAIT_S`` at the most."""
    try:
        if after is not None:  # or the run ends first
            waits = [asyncio.ensure_future(e.wait()) for e in (after, stop)]
            try:
                await asyncio.wait(waits, timeout=GPU_OPEN_WAIT_S, return_when="FIRST_COMPLETED")
            finally:
                for w in waits:
                    w.cancel()
        await c.run(stop)
    except asyncio.CancelledError:
        raise
    except Exception as e:
        recorder.event(
            RunEvent(
                clock.now(),
                "collector_failed",
                f"collector {c.name} stopped: {type(e).__name__}: {e}; its telemetry ends here",
                "error",
                source=c.name,
                data={"collector": c.name},
            )
        )


@dataclass(slots=True)
class _Said:
    kind: EventKind
    message: str
    severity: Severity
    silent_s: float

    def at(self, now: float) -> RunEvent:
        data = {"silent_since_s": round(now - self.silent_s, 3)}
        return RunEvent(
            now,
            self.kind,
            self.message,
            self.severity,
            source="client",
            data=data if self.kind == "hang_suspected" else {},
        )


@dataclass(slots=True)
class ClientHangWatch:
    """Silence on every stream, counted only while requests are in flight: a hang is
    ``hang_after`` seconds of it in all, and it clears when a byte comes again.

    Counting busy time since the last byte (not since the current request began) keeps a
    frozen server in view when its requests time out and users send again: each new
    request, and each think between two, used to restart the count, so a server frozen
    longer than ``hang_after`` whose requests timed out sooner was never seen here."""

    seen: float
    """The last byte's time (``perf_counter``) when last looked at."""
    prev: float
    silent_s: float = 0.0
    """Seconds with a request in flight since the last byte on any stream."""
    hung: bool = False

    def tick(self, now: float, byte: float, in_flight: int, hang_after: float) -> _Said | None:
        """Advance to ``now``; the event to write, if any."""
        if byte > self.seen:
            self.seen, self.silent_s = byte, (now - byte if in_flight > 0 else 0.0)
            if self.hung:
                self.hung = False
                return _Said("hang_cleared", "bytes flowing again", "warning", 0.0)
        elif in_flight > 0:
            self.silent_s += now - self.prev
        self.prev = now
        if not self.hung and in_flight > 0 and self.silent_s >= hang_after:
            self.hung = True
            return _Said(
                "hang_suspected",
                f"{in_flight} request(s) in flight and no bytes on any stream for "
                f"{self.silent_s:.0f}s of requests in flight: the server may be hung "
                "(restart counters would not show this)",
                "error",
                self.silent_s,
            )
        return None


async def monitor(
    live: Live,
    collectors: list[Collector],
    last_byte: Callable[[], float],
    gate: HangGate,
    clock: RunClock,
    hang_after: float,
    stop: asyncio.Event,
) -> None:
    """Once a second: copy collectors' live views into the live state, and watch for a
    hang seen from the client side (``ClientHangWatch``), which a restart counter alone
    would miss (field note 5)."""
    watch = ClientHangWatch(last_byte(), time.perf_counter())
    while not stop.is_set():
        for c in collectors:
            with contextlib.suppress(Exception):
                live.collectors[c.name] = c.live()
        event = watch.tick(time.perf_counter(), last_byte(), live.in_flight, hang_after)
        if event is not None:
            gate.event(event.at(clock.now()))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=1.0)
