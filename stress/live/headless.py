"""The plain-text UI sink: progress lines and events, for CI, pipes and ``--no-tui``.

Prints a status line at a fixed interval and each notable event as it happens, without
flooding the terminal:

- run-level failures (``recorder_failed``, ``collector_failed``, ``user_crashed``,
  ``worker_died``) are
  printed at once, every one, and named in every later status line;
- per-request events (``request_failed``, ``empty_reply``, ``stall``) are printed at most
  ``REQUEST_LINES`` per status interval, the rest counted in one "... and K more" line;
- other warnings and errors: the first ``MAX_PER_KIND`` of each kind, then counted.

The status line names the users whose request has waited longest for its first token or
been silent longest (``u3 1st token 23s``), so a stall shows while it happens. Nothing
here grows with the run. Everything printed goes through the secret redactor. A
time-scaled simulator run is printed in simulated seconds, the snapshot's clock, and its
status line says so (``simulated time x60``).
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol, TextIO

from stress.analysis.runfiles import sim_seconds
from stress.core.durations import format_duration
from stress.core.events import RunEvent
from stress.core.secrets import REDACTOR
from stress.live.state import REQUEST_EVENT_KINDS, RUN_FAILURE_KINDS, SILENT_AFTER_S, Snapshot
from stress.live.throttle import RequestLines

MAX_PER_KIND = 5
LONGEST_WAITS = 3
"""Users named in the status line's ``longest waits`` part."""


class UiSink(Protocol):
    """What the run talks to: the headless printer here, or the TUI (``stress.tui``)."""

    def line(self, text: str) -> None:
        """Show one message (stopping, Ctrl-C hints)."""

    def on_event(self, ev: RunEvent) -> None:
        """Show a run event."""

    async def run(self, stop: asyncio.Event) -> None:
        """Render until ``stop`` is set (the run has ended), then return."""


class HeadlessPrinter:
    def __init__(
        self,
        snapshot: Callable[[], Snapshot],
        total_s: float | None,
        interval_s: float = 5.0,
        stream: TextIO | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.total_s = total_s
        """The run's planned length in the engine's (wall) seconds; shown on the snapshot's
        clock."""
        self.interval_s = interval_s
        self.out = stream or sys.stdout
        self._kinds: Counter[str] = Counter()
        self._requests = RequestLines()
        self._scale: float | None = None

    @property
    def time_scale(self) -> float:
        """The snapshots' time scale, asked once (events can come before any status line)."""
        if self._scale is None:
            self._scale = self.snapshot().time_scale
        return self._scale

    def line(self, text: str) -> None:
        print(REDACTOR.text(text), file=self.out, flush=True)

    def _event_line(self, ev: RunEvent) -> None:
        who = f"u{ev.user} " if ev.user is not None else ""
        t = format_duration(sim_seconds(ev.t, self.time_scale))
        self.line(f"[{t:>6}] {ev.severity.upper()}: {who}{ev.message}")

    def on_event(self, ev: RunEvent) -> None:
        if ev.kind in RUN_FAILURE_KINDS:
            self._kinds[ev.kind] += 1
            self._event_line(ev)
            return
        if ev.severity == "info":
            return
        self._kinds[ev.kind] += 1
        if ev.kind in REQUEST_EVENT_KINDS:
            if self._requests.admit(ev.kind):
                self._event_line(ev)
            return
        n = self._kinds[ev.kind]
        if n <= MAX_PER_KIND:
            self._event_line(ev)
        elif n == MAX_PER_KIND + 1:
            t = format_duration(sim_seconds(ev.t, self.time_scale))
            self.line(
                f"[{t:>6}] (further '{ev.kind}' events are counted in events.jsonl, not printed)"
            )

    def end_interval(self) -> None:
        """Say how many per-request events were not printed, and open a new budget."""
        held = self._requests.new_window()
        if held is not None:
            self.line(f"         {held}")

    def failures(self) -> list[str]:
        """The run-level failures so far, as status-line parts."""
        out: list[str] = []
        if self._kinds["recorder_failed"]:
            out.append("RECORDER FAILED: run files not written")
        if n := self._kinds["user_crashed"]:
            out.append(f"{n} user{'s' if n > 1 else ''} CRASHED")
        if n := self._kinds["record_failed"]:
            out.append(f"{n} record{'s' if n > 1 else ''} FAILED")
        if n := self._kinds["worker_died"]:
            out.append(f"{n} worker{'s' if n > 1 else ''} DIED")
        if n := self._kinds["collector_failed"]:
            out.append(f"{n} collector{'s' if n > 1 else ''} FAILED")
        return out

    @staticmethod
    def longest_waits(s: Snapshot) -> str | None:
        """``u3 1st token 23s, u5 silent 12s, +2 more``: requests quiet for over 2 s."""
        waits: list[tuple[float, str]] = []
        for u in s.users:
            if u.first_token_wait_s is not None and u.first_token_wait_s >= SILENT_AFTER_S:
                waits.append((u.first_token_wait_s, f"u{u.user} 1st token"))
            elif u.silent_s is not None and u.silent_s >= SILENT_AFTER_S:
                waits.append((u.silent_s, f"u{u.user} silent"))
        if not waits:
            return None
        waits.sort(reverse=True)
        shown = [
            f"{what} {format_duration(float(int(age)))}" for age, what in waits[:LONGEST_WAITS]
        ]
        if len(waits) > LONGEST_WAITS:
            shown.append(f"+{len(waits) - LONGEST_WAITS} more")
        return "longest waits: " + ", ".join(shown)

    def status(self, s: Snapshot) -> str:
        self._scale = s.time_scale
        total = (
            f" / {format_duration(sim_seconds(self.total_s, s.time_scale))}" if self.total_s else ""
        )
        clock = f" ({s.clock_label})" if s.clock_label else ""
        o = s.outcomes
        ttft = f"{s.ttft_p50_recent:.2f}s" if s.ttft_p50_recent is not None else "-"
        cache = f"{100 * s.cached_share_recent:.0f}%" if s.cached_share_recent is not None else "-"
        longest = max((u.conversation_tokens for u in s.users), default=0)
        parts = [
            f"[{format_duration(s.t):>6}{total}] {s.phase}{clock}",
            *self.failures(),
            f"requests {s.rounds_done} (ok {o['ok']}, err {s.errors}, cancelled {s.cancelled}, "
            f"empty {o['empty']}, "
            f"reasoning-only {o['reasoning_only']}, truncated {o['truncated']})",
            *(
                [
                    f"sessions {s.sessions_active} active, {s.backlog} waiting, {s.arrivals} "
                    f"arrived ({s.arrivals_per_min_recent or 0:.1f}/min), {s.sessions_done} left"
                ]
                if s.open_loop
                else []
            ),
            f"in flight {s.in_flight}",
            f"TTFT p50 {ttft}",
            f"out {s.out_tok_s_recent:.0f} tok/s",
            f"cached {cache}",
            f"longest conv {longest:,} tok",
        ]
        server = s.collectors.get("server")
        if server and server.get("hit_rate_window") is not None:
            parts.append(f"server hit {100 * server['hit_rate_window']:.0f}%")
        stalls = sum(u.stalls for u in s.users)
        if stalls:
            parts.append(f"stalls {stalls}")
        waits = self.longest_waits(s)
        if waits:
            parts.append(waits)
        if s.workers:
            parts.append(workers_text(s.workers))
        return " | ".join(parts)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.interval_s)
            except TimeoutError:
                self.end_interval()
                self.line(self.status(self.snapshot()))
        self.end_interval()


def fallback_printer(snapshot: Callable[[], Snapshot], header: dict[str, Any]) -> HeadlessPrinter:
    """The plain printer a live view falls back to, for the run its ``header`` describes."""
    duration = header.get("duration_s")
    return HeadlessPrinter(snapshot, float(duration) if isinstance(duration, int | float) else None)


def workers_text(workers: dict[int, dict[str, Any]]) -> str:
    """``workers: w0 cpu 41% lag 3ms 88MiB, w1 DEAD``: each worker process's latest health,
    so an overloaded (or dead) one shows while the run goes on."""
    parts = []
    for k, h in sorted(workers.items()):
        name = f"w{k}@{h['host']}" if h.get("host") else f"w{k}"  # a Ray worker's node
        if h.get("dead"):
            parts.append(f"{name} DEAD")
        elif h.get("cpu_pct") is None:
            parts.append(f"{name} starting")
        else:
            parts.append(
                f"{name} cpu {h['cpu_pct']:.0f}% lag {h.get('loop_lag_ms_max') or 0:.0f}ms "
                f"{h.get('rss_mib') or 0:.0f}MiB"
            )
    return "workers: " + ", ".join(parts)
