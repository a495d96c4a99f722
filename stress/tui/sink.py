"""``TuiSink``: the UI sink ``stress.runtime.run`` uses when stdout is a terminal.

It runs the Textual app on the run's own event loop until the run ends, then exits the app
so the terminal is restored before the summary is printed. The UI can never cost the run:
if stdout is not a terminal, or the app fails or is closed, the sink falls back to the
headless printer for the rest of the run, and the run's files are written either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable
from typing import Any

from stress.core.events import RunEvent
from stress.live.headless import HeadlessPrinter, fallback_printer
from stress.live.state import Snapshot
from stress.live.view_process import TICK_S
from stress.tui.app import StressApp
from stress.tui.feed import Feed


class TuiSink:
    """Satisfies ``stress.live.headless.UiSink``.

    ``headless`` and ``size`` exist for tests and benchmarks: the app then renders into a
    virtual screen of that size; ``on_app`` is called with the app before it starts.
    """

    def __init__(
        self,
        header: dict[str, Any],
        snapshot: Callable[[], Snapshot],
        on_quit: Callable[[], None],
        on_cancel: Callable[[], None],
        *,
        headless: bool = False,
        size: tuple[int, int] | None = None,
        tick_s: float = TICK_S,
        on_app: Callable[[StressApp], None] | None = None,
        on_rows: Callable[[tuple[int, int] | None], None] | None = None,
    ) -> None:
        self.feed = Feed(header, snapshot, on_quit, on_cancel, on_rows)
        self.headless = headless
        self.size = size
        self.tick_s = tick_s
        self.on_app = on_app
        self.app: StressApp | None = None
        self._fallback: HeadlessPrinter | None = None
        self.started = asyncio.Event()
        """Set when the screen is up, or when the UI gave up and fell back to lines."""

    def line(self, text: str) -> None:
        if self._fallback is not None:
            self._fallback.line(text)
        else:
            self.feed.add_line(text)

    def on_event(self, ev: RunEvent) -> None:
        if self._fallback is not None:
            self._fallback.on_event(ev)
        else:
            self.feed.add_event(ev)

    def build_app(self) -> StressApp:
        return StressApp(self.feed, tick_s=self.tick_s)

    async def run(self, stop: asyncio.Event) -> None:
        if not self.headless and not sys.stdout.isatty():
            self.started.set()
            await self._headless(stop, None)
            return
        app = self.app = self.build_app()
        if self.on_app is not None:
            self.on_app(app)
        task = asyncio.create_task(app.run_async(headless=self.headless, size=self.size))
        stopped = asyncio.create_task(stop.wait())
        ready = asyncio.create_task(app.ready.wait())
        try:
            # Textual's start-up (~100 ms of loop time) must not land on the first requests
            await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
            self.started.set()
            await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not task.done():
                app.exit()
                with contextlib.suppress(Exception):
                    await task
            stopped.cancel()
            ready.cancel()
            self.started.set()
        if not stop.is_set():
            # The app ended on its own (closed, or crashed): keep reporting as plain lines.
            problem = task.exception() if not task.cancelled() else None
            reason = f"TUI failed ({type(problem).__name__}: {problem})" if problem else None
            await self._headless(stop, reason)

    async def _headless(self, stop: asyncio.Event, reason: str | None) -> None:
        self.feed.show_rows(None)  # lines count every user's stalls and conversations
        printer = fallback_printer(self.feed.snapshot, self.feed.header)
        self._fallback = printer
        if reason:
            printer.line(f"{reason}; continuing with plain output")
        for line in self.feed.drain():
            printer.line(line.plain)
        await printer.run(stop)
