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
from typing import Any

from stress.collectors.base import Collector, RunClock
from stress.config.scenario import LoadedScenario
from stress.core.events import RunEvent
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
    hang seen from the client side (requests in flight, not a byte on any stream), which
    a restart counter alone would miss (field note 5)."""
    hung_since: float | None = None
    busy_since: float | None = None
    while not stop.is_set():
        for c in collectors:
            with contextlib.suppress(Exception):
                live.collectors[c.name] = c.live()
        now = time.perf_counter()
        if live.in_flight == 0:
            busy_since = None
        elif busy_since is None:
            busy_since = now
        quiet = now - max(last_byte(), busy_since or now)
        if live.in_flight > 0 and quiet >= hang_after:
            if hung_since is None:
                hung_since = clock.now() - quiet
                gate.event(
                    RunEvent(
                        clock.now(),
                        "hang_suspected",
                        f"{live.in_flight} request(s) in flight and no bytes on any stream for "
                        f"{quiet:.0f}s: the server may be hung (restart counters would not show "
                        "this)",
                        "error",
                        source="client",
                        data={"silent_since_s": round(hung_since, 3)},
                    )
                )
        elif hung_since is not None and quiet < hang_after:
            gate.event(
                RunEvent(
                    clock.now(),
                    "hang_cleared",
                    f"bytes flowing again after {clock.now() - hung_since:.0f}s",
                    "warning",
                    source="client",
                )
            )
            hung_since = None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=1.0)
