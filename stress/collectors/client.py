"""The client's own health: is ``stress`` measuring the server, or itself?

A load generator whose event loop lags reports the lag as server latency. This collector
watches the process that runs the users, beside them on the same loop:

- event-loop lag: a probe sleeps to fixed deadlines (every ``probe_s``) and records how
  late it woke; a loop busy with other work wakes it late by exactly the delay every
  request's timing suffers;
- process CPU (100 % = one core; the loop can use at most one), RSS, open descriptors;
- the machine: CPU busy over all cores, steal (a VM's host taking the CPU), 1-minute load.

Every ``interval_s`` it writes one ``client`` record (lag p50 / max over the window's
probes, CPU, RSS, the machine's figures), keeps the latest for the live view, and raises a
``client_overloaded`` warning, at most once per ``warn_every_s``, when the lag stays above
``lag_warn_ms`` or CPU near a full core for ``warn_after`` consecutive samples.

A lagging loop has three different causes, and the warning names the one the figures
show (``overload_cause``), with its evidence, because the fixes differ:

- ``stress``: the process itself is near a full core (or busy, on an otherwise idle
  machine): too many users for one process;
- ``machine``: stress's own CPU is low but the machine is full (other processes busy on
  every core, load above the core count, or steal): it waits for a CPU;
- ``loop``: lag with little CPU used anywhere: something blocked the loop (a synchronous
  call: disk, DNS), a bug to report.

Per-request queueing (the scheduled-to-sent delay) is in each request record as
``queue_s``, not here. Run figures are bounded in a soak: a fixed log-bucket histogram of
probe lags, running CPU and RSS figures; nothing grows with the run's length. It never
raises out of ``run``.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import math
import os
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

import psutil  # type: ignore[import-untyped]  # ships no stubs

from stress.collectors.base import Collector, RunClock, Sink
from stress.core.events import RunEvent

# probe-lag histogram: 0.01 ms .. ~100 s, 20 buckets per decade (bucket width ~12 %)
_EDGES_MS = [10 ** (-2 + i / 20) for i in range(141)]


Cause = Literal["stress", "machine", "loop"]
MACHINE_BUSY_PCT = 90.0
"""The machine counts as full above this share of all cores busy..."""
OTHERS_MIN_CORES = 0.5
"""...when other processes use at least this many cores of it (not stress alone)."""
STEAL_PCT = 10.0
"""CPU time a VM's host took away, as a share of all cores."""
STRESS_BUSY_PCT = 50.0
"""On a machine that is not full, stress at this much of a core causes its own lag."""


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


@dataclass(frozen=True, slots=True)
class MachineLoad:
    """The whole machine over one sample window; any figure may be unknown (None)."""

    busy_pct: float | None = None
    """CPU busy, all cores together (100 = every core busy), steal included."""
    steal_pct: float | None = None
    load1: float | None = None
    cores: int = 1


class _MachineProbe:
    """System-wide CPU times between two calls; the 1-minute load average."""

    def __init__(self) -> None:
        self.cores = psutil.cpu_count() or os.cpu_count() or 1
        self._prev = self._times()

    @staticmethod
    def _times() -> tuple[float, float, float] | None:
        """(busy, steal, total) CPU seconds of the machine since boot, or None."""
        try:
            t = psutil.cpu_times()
        except Exception:  # no /proc/stat: the machine's figures are unknown, not an error
            return None
        # as psutil.cpu_percent does: guest time is already inside user / nice on Linux
        total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
        idle = t.idle + getattr(t, "iowait", 0.0)
        return total - idle, getattr(t, "steal", 0.0), total

    def sample(self) -> MachineLoad:
        now, prev = self._times(), self._prev
        self._prev = now
        try:
            load1: float | None = os.getloadavg()[0]
        except OSError:
            load1 = None
        if now is None or prev is None or now[2] <= prev[2]:
            return MachineLoad(load1=load1, cores=self.cores)
        span = now[2] - prev[2]
        busy = 100 * max(0.0, now[0] - prev[0]) / span
        steal = 100 * max(0.0, now[1] - prev[1]) / span
        return MachineLoad(min(busy, 100.0), min(steal, 100.0), load1, self.cores)


def overload_cause(cpu_pct: float, machine: MachineLoad, cpu_warn_pct: float) -> Cause:
    """Why the loop lags: stress's own CPU, a full machine, or a blocked loop."""
    if cpu_pct >= cpu_warn_pct:
        return "stress"
    if machine_is_full(cpu_pct, machine):
        return "machine"
    if cpu_pct >= STRESS_BUSY_PCT:
        return "stress"
    return "loop"


def machine_is_full(cpu_pct: float, m: MachineLoad) -> bool:
    """Other processes keep every core busy, the run queue is longer than the cores, or a
    VM's host takes the CPU away."""
    if m.steal_pct is not None and m.steal_pct >= STEAL_PCT:
        return True
    if m.load1 is not None and m.load1 > m.cores:
        return True
    if m.busy_pct is None:
        return False
    others_cores = m.busy_pct / 100 * m.cores - cpu_pct / 100
    return m.busy_pct >= MACHINE_BUSY_PCT and others_cores >= OTHERS_MIN_CORES


def cause_text(cause: Cause, lag_max: float, cpu_pct: float, m: MachineLoad, n: int) -> str:
    """The warning's message: what lags, the cause with its evidence, what to do."""
    machine = []
    if m.busy_pct is not None:
        machine.append(f"{m.busy_pct:.0f} % busy over {m.cores} core{'s' if m.cores > 1 else ''}")
    if m.load1 is not None:
        machine.append(f"load {m.load1:.1f}")
    if m.steal_pct:
        machine.append(f"steal {m.steal_pct:.0f} %")
    evidence = (
        f"event-loop lag up to {lag_max:.0f} ms, stress at {cpu_pct:.0f} % of a core, "
        f"machine {', '.join(machine) or 'figures unknown'}, for {n} samples"
    )
    if cause == "stress":
        return (
            f"stress itself is overloaded ({evidence}): TTFT and latencies may include the "
            "client's own delay, results may be distorted -- fix: fewer users per stress "
            "process (split the load over processes pinned to different cores)"
        )
    if cause == "machine":
        return (
            f"the machine is starved by other processes, not by stress ({evidence}): stress "
            "waits for a CPU and latencies may include that wait, results may be distorted "
            "-- fix: stop the other work on this machine, or run stress on another one"
        )
    return (
        f"the event loop was blocked while little CPU was used anywhere ({evidence}): a "
        "blocking call in stress (disk, DNS), not load; results may be distorted -- please "
        "report it with client.jsonl"
    )


class ClientHealthCollector(Collector):
    name = "client"

    def __init__(
        self,
        sink: Sink,
        clock: RunClock,
        interval_s: float,
        *,
        probe_s: float = 0.1,
        lag_warn_ms: float = 20.0,
        cpu_warn_pct: float = 90.0,
        warn_after: int = 3,
        warn_every_s: float = 60.0,
    ) -> None:
        super().__init__(sink, clock, interval_s)
        self.probe_s = min(probe_s, interval_s)
        self.lag_warn_ms = lag_warn_ms
        self.cpu_warn_pct = cpu_warn_pct
        self.warn_after = warn_after
        self.warn_every_s = warn_every_s
        self._proc = psutil.Process()
        self._machine: _MachineProbe | None = None
        self._causes: Counter[str] = Counter()
        self._window: list[float] = []
        self._hist = [0] * (len(_EDGES_MS) + 1)
        self._probes = 0
        self._lag_max_ms = 0.0
        self._lag_sum_ms = 0.0
        self._samples = 0
        self._cpu_sum = 0.0
        self._cpu_max = 0.0
        self._rss_first: float | None = None
        self._rss_last = 0.0
        self._rss_max = 0.0
        self._high_run = 0
        self._overloaded_samples = 0
        self._warnings = 0
        self._last_warn_t: float | None = None
        self._live: dict[str, Any] = {}

    # --- measuring -----------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        try:
            self._machine = _MachineProbe()
            perf = time.perf_counter
            start = perf()
            cpu_prev, t_prev = _cpu_seconds(), start
            due = start + self.probe_s
            next_sample = start + self.interval_s
            while not stop.is_set():
                await asyncio.sleep(max(due - perf(), 0.0))
                now = perf()
                self._window.append(max(now - due, 0.0) * 1000)
                due += self.probe_s
                if due <= now:  # a stall longer than a probe period: skip, don't burst
                    due += math.ceil((now - due) / self.probe_s) * self.probe_s
                if now >= next_sample:
                    next_sample += self.interval_s * max(
                        1, math.ceil((now - next_sample) / self.interval_s)
                    )
                    cpu = _cpu_seconds()
                    cpu_pct = 100 * (cpu - cpu_prev) / (now - t_prev) if now > t_prev else 0.0
                    cpu_prev, t_prev = cpu, now
                    self._sample(cpu_pct)
            now = perf()
            if self._window or now > t_prev:
                self._sample(100 * (_cpu_seconds() - cpu_prev) / max(now - t_prev, 1e-9))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug here must not end the run
            self.sink.event(
                RunEvent(
                    self.clock.now(),
                    "collector_error",
                    f"client health stopped: {type(exc).__name__}: {exc}",
                    "error",
                    source="client",
                )
            )

    def _sample(self, cpu_pct: float) -> None:
        mem = self._proc.memory_info()
        try:
            fds: int | None = self._proc.num_fds()
        except (psutil.Error, AttributeError):
            fds = None
        lags, self._window = self._window, []
        machine = self._machine.sample() if self._machine is not None else None
        self.ingest(self.clock.now(), lags, cpu_pct, mem.rss / (1 << 20), fds, machine)

    # --- bookkeeping (pure: tests feed it directly) --------------------------------------

    def ingest(
        self,
        t: float,
        lags_ms: list[float],
        cpu_pct: float,
        rss_mib: float,
        open_fds: int | None = None,
        machine: MachineLoad | None = None,
    ) -> dict[str, Any]:
        """Fold one window's probe lags, the process and the machine figures in; write the
        record."""
        m = machine or MachineLoad()
        if lags_ms:
            for lag in lags_ms:
                self._hist[bisect.bisect_right(_EDGES_MS, lag)] += 1
            lag_p50, lag_max = statistics.median(lags_ms), max(lags_ms)
            self._probes += len(lags_ms)
            self._lag_sum_ms += math.fsum(lags_ms)
            self._lag_max_ms = max(self._lag_max_ms, lag_max)
        else:
            lag_p50 = lag_max = 0.0
        self._samples += 1
        self._cpu_sum += cpu_pct
        self._cpu_max = max(self._cpu_max, cpu_pct)
        if self._rss_first is None:
            self._rss_first = rss_mib
        self._rss_last = rss_mib
        self._rss_max = max(self._rss_max, rss_mib)
        record: dict[str, Any] = {
            "t": round(t, 3),
            "loop_lag_ms_p50": round(lag_p50, 3),
            "loop_lag_ms_max": round(lag_max, 3),
            "probes": len(lags_ms),
            "cpu_pct": round(cpu_pct, 1),
            "rss_mib": round(rss_mib, 1),
            "open_fds": open_fds,
            "machine_cpu_pct": None if m.busy_pct is None else round(m.busy_pct, 1),
            "steal_pct": None if m.steal_pct is None else round(m.steal_pct, 1),
            "load1": None if m.load1 is None else round(m.load1, 2),
        }
        self.sink.write("client", record)
        self._live = {
            "loop_lag_ms_p50": record["loop_lag_ms_p50"],
            "loop_lag_ms_max": record["loop_lag_ms_max"],
            "cpu_pct": record["cpu_pct"],
            "rss_mib": record["rss_mib"],
            "machine_cpu_pct": record["machine_cpu_pct"],
            "load1": record["load1"],
        }
        self._assess(t, lag_max, cpu_pct, m)
        return record

    def _assess(self, t: float, lag_max: float, cpu_pct: float, m: MachineLoad) -> None:
        high = lag_max > self.lag_warn_ms or cpu_pct >= self.cpu_warn_pct
        self._high_run = self._high_run + 1 if high else 0
        if not high:
            return
        self._overloaded_samples += 1
        cause = overload_cause(cpu_pct, m, self.cpu_warn_pct)
        self._causes[cause] += 1
        if self._high_run < self.warn_after:
            return
        if self._last_warn_t is not None and t - self._last_warn_t < self.warn_every_s:
            return
        self._last_warn_t = t
        self._warnings += 1
        self.sink.event(
            RunEvent(
                t,
                "client_overloaded",
                cause_text(cause, lag_max, cpu_pct, m, self._high_run),
                "warning",
                source="client",
                data={
                    "cause": cause,
                    "loop_lag_ms_max": round(lag_max, 1),
                    "cpu_pct": round(cpu_pct, 1),
                    "machine_cpu_pct": None if m.busy_pct is None else round(m.busy_pct, 1),
                    "steal_pct": None if m.steal_pct is None else round(m.steal_pct, 1),
                    "load1": None if m.load1 is None else round(m.load1, 2),
                    "cores": m.cores,
                },
            )
        )

    # --- views -------------------------------------------------------------------------

    def live(self) -> dict[str, Any]:
        return dict(self._live)

    def _lag_percentile(self, q: float) -> float | None:
        if not self._probes:
            return None
        rank = q * self._probes
        i = bisect.bisect_left(list(itertools.accumulate(self._hist)), rank)
        edge = _EDGES_MS[min(i, len(_EDGES_MS) - 1)]  # the bucket's upper edge
        return min(edge, self._lag_max_ms)

    def summary(self) -> dict[str, Any]:
        n = self._samples
        p50, p99 = self._lag_percentile(0.5), self._lag_percentile(0.99)
        return {
            "samples": n,
            "probes": self._probes,
            "probe_s": self.probe_s,
            "loop_lag_ms_mean": round(self._lag_sum_ms / self._probes, 3) if self._probes else None,
            "loop_lag_ms_p50": None if p50 is None else round(p50, 3),
            "loop_lag_ms_p99": None if p99 is None else round(p99, 3),
            "loop_lag_ms_max": round(self._lag_max_ms, 3),
            "cpu_pct_mean": round(self._cpu_sum / n, 1) if n else None,
            "cpu_pct_max": round(self._cpu_max, 1),
            "rss_mib_start": None if self._rss_first is None else round(self._rss_first, 1),
            "rss_mib_end": round(self._rss_last, 1),
            "rss_mib_max": round(self._rss_max, 1),
            "overloaded_samples": self._overloaded_samples,
            "overload_causes": dict(self._causes),
            "overload_cause": self._causes.most_common(1)[0][0] if self._causes else None,
            "warnings": self._warnings,
            "distorted": self._warnings > 0,
        }


def merge_health(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One ``client`` summary for a run of several processes (the parent and its
    ``--workers``): the worst process's lag and CPU, memory summed, overload counted over
    all, distorted when any was. Each process's own summary stays in collectors.json's
    ``workers``."""
    parts = [p for p in parts if p.get("samples")]
    if not parts:
        return {}

    def top(key: str) -> Any:
        values = [p[key] for p in parts if p.get(key) is not None]
        return max(values) if values else None

    def total(key: str) -> Any:
        values = [p[key] for p in parts if p.get(key) is not None]
        return round(sum(values), 1) if values else None

    probes = sum(p.get("probes") or 0 for p in parts)
    lag_sum = sum((p.get("loop_lag_ms_mean") or 0.0) * (p.get("probes") or 0) for p in parts)
    causes: Counter[str] = Counter()
    for p in parts:
        causes.update(p.get("overload_causes") or {})
    return {
        "samples": sum(p["samples"] for p in parts),
        "probes": probes,
        "probe_s": parts[0].get("probe_s"),
        "loop_lag_ms_mean": round(lag_sum / probes, 3) if probes else None,
        "loop_lag_ms_p50": top("loop_lag_ms_p50"),
        "loop_lag_ms_p99": top("loop_lag_ms_p99"),
        "loop_lag_ms_max": top("loop_lag_ms_max"),
        "cpu_pct_mean": top("cpu_pct_mean"),
        "cpu_pct_max": top("cpu_pct_max"),
        "rss_mib_start": total("rss_mib_start"),
        "rss_mib_end": total("rss_mib_end"),
        "rss_mib_max": total("rss_mib_max"),
        "overloaded_samples": sum(p.get("overloaded_samples") or 0 for p in parts),
        "overload_causes": dict(causes),
        "overload_cause": causes.most_common(1)[0][0] if causes else None,
        "warnings": sum(p.get("warnings") or 0 for p in parts),
        "distorted": any(p.get("distorted") for p in parts),
    }
