"""The plain-text UI sink: progress lines and events, for CI, pipes and ``--no-tui``.

Prints a status line at a fixed interval and each notable event as it happens; repeated
events of one kind are counted rather than flooding the terminal. Everything printed goes
through the secret redactor.
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import Callable
from typing import Protocol, TextIO

from stress.durations import format_duration
from stress.events import RunEvent
from stress.live import Snapshot
from stress.secrets import REDACTOR

MAX_PER_KIND = 5


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
        self.interval_s = interval_s
        self.out = stream or sys.stdout
        self._kinds: Counter[str] = Counter()

    def line(self, text: str) -> None:
        print(REDACTOR.text(text), file=self.out, flush=True)

    def on_event(self, ev: RunEvent) -> None:
        if ev.severity == "info":
            return
        self._kinds[ev.kind] += 1
        n = self._kinds[ev.kind]
        if n <= MAX_PER_KIND:
            self.line(f"[{format_duration(ev.t):>6}] {ev.severity.upper()}: {ev.message}")
        elif n == MAX_PER_KIND + 1:
            self.line(
                f"[{format_duration(ev.t):>6}] (further '{ev.kind}' events are counted "
                "in events.jsonl, not printed)"
            )

    def status(self, s: Snapshot) -> str:
        total = f" / {format_duration(self.total_s)}" if self.total_s else ""
        o = s.outcomes
        ttft = f"{s.ttft_p50_recent:.2f}s" if s.ttft_p50_recent is not None else "-"
        cache = f"{100 * s.cached_share_recent:.0f}%" if s.cached_share_recent is not None else "-"
        longest = max((u.conversation_tokens for u in s.users), default=0)
        parts = [
            f"[{format_duration(s.t):>6}{total}] {s.phase}",
            f"requests {s.rounds_done} (ok {o['ok']}, err {o['error']}, empty {o['empty']}, "
            f"reasoning-only {o['reasoning_only']}, truncated {o['truncated']})",
            f"in flight {s.in_flight}",
            f"TTFT p50 {ttft}",
            f"out {s.out_tok_s_recent:.0f} tok/s",
            f"cached {cache}",
            f"longest conv {longest:,} tok",
        ]
        server = s.collectors.get("server")
        if server and server.get("hit_rate_window") is not None:
            parts.append(f"server hit {100 * server['hit_rate_window']:.0f}%")
        return " | ".join(parts)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.interval_s)
            except TimeoutError:
                self.line(self.status(self.snapshot()))
