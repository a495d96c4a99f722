"""``python -m stress.tui.child DOWN_FD UP_FD [--headless WxH]``: the live view's process.

Started by ``stress.live.view_process.TuiProcess`` with the run's terminal. It reads the run's
header and then its snapshots (pickled, length-framed) from ``DOWN_FD``, renders each one
as it arrives with ``TuiSink``, and writes one line per message to ``UP_FD``: ``ready``
when the first screen is up, ``quit`` and ``cancel`` for the keys that stop the run,
``rows FIRST COUNT`` for the users' rows it shows (``rows -``: all), and ``failed ...``
before it gives up. It stops when told to or when the run's end of the
pipe closes (the run is gone), restoring the terminal either way. Ctrl-C is not its to
handle: in the view it is a key; before the view is up, the run gets it.

``--headless WxH`` renders into a virtual screen of that size (benchmarks).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from typing import IO, Any

from stress.core.events import RunEvent
from stress.live.state import Snapshot
from stress.live.view_process import Frames, Ticks
from stress.tui.sink import TuiSink

_IDLE_TICK_S = 3600.0
"""The app's own timer: it repaints when a snapshot arrives, not on a clock."""


class _View:
    """What the run sent so far, and the sink that shows it."""

    def __init__(self, up: IO[bytes], headless: bool, size: tuple[int, int] | None) -> None:
        self.up = up
        self.headless = headless
        self.size = size
        self.header: dict[str, Any] | None = None
        self.latest: Snapshot | None = None
        self.ticks = Ticks()
        self.sink: TuiSink | None = None
        self.early: list[RunEvent | str] = []
        self.dropped = 0
        """Lines the run could not hold for the view while it was behind."""
        self.first = asyncio.Event()
        self.stop = asyncio.Event()

    def say(self, line: str) -> None:
        with contextlib.suppress(OSError, ValueError):  # the run is gone: nothing to tell
            self.up.write(line.encode() + b"\n")

    def on_message(self, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "header":
            self.header = msg[1]
        elif kind == "tick":
            _, snap, items, dropped, changed = msg
            self.latest = self.ticks.decode(snap, changed)
            self.dropped += dropped  # shown by the feed, as its own skipped lines
            self._show(items)
            self.first.set()
        elif kind == "stop":
            self.stop.set()

    def _show(self, items: list[RunEvent | str]) -> None:
        sink = self.sink
        if sink is None:
            self.early += items
            return
        sink.feed.dropped += self.dropped
        self.dropped = 0
        for item in items:
            if isinstance(item, str):
                sink.line(item)
            else:
                sink.on_event(item)
        app = sink.app
        if app is not None and app.ready.is_set() and app.is_running:
            app.call_later(app.tick)

    def make_sink(self) -> TuiSink:
        assert self.header is not None
        sink = self.sink = TuiSink(
            self.header,
            self.snapshot,
            on_quit=lambda: self.say("quit"),
            on_cancel=lambda: self.say("cancel"),
            on_rows=self.say_rows,
            headless=self.headless,
            size=self.size,
            tick_s=_IDLE_TICK_S,
        )
        self._show(self.early)
        self.early = []
        return sink

    def say_rows(self, rows: tuple[int, int] | None) -> None:
        self.say("rows -" if rows is None else f"rows {rows[0]} {rows[1]}")

    def snapshot(self) -> Snapshot:
        assert self.latest is not None
        return self.latest


class _Reader(asyncio.Protocol):
    def __init__(self, view: _View) -> None:
        self.view = view
        self.frames = Frames()

    def data_received(self, data: bytes) -> None:
        for msg in self.frames.feed(data):
            self.view.on_message(msg)

    def connection_lost(self, exc: Exception | None) -> None:
        self.view.stop.set()  # the run closed its end (or died): nothing more will come


async def _serve(view: _View, down: int) -> None:
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: _Reader(view), os.fdopen(down, "rb", 0))
    first = asyncio.create_task(view.first.wait())
    stopped = asyncio.create_task(view.stop.wait())
    await asyncio.wait({first, stopped}, return_when=asyncio.FIRST_COMPLETED)
    first.cancel()
    stopped.cancel()
    if view.stop.is_set():
        return
    sink = view.make_sink()

    async def say_ready() -> None:
        await sink.started.wait()
        view.say("ready")

    ready = asyncio.create_task(say_ready())
    try:
        await sink.run(view.stop)
    finally:
        ready.cancel()


def parse_size(text: str) -> tuple[int, int]:
    w, h = text.lower().split("x")
    return int(w), int(h)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    down, up_fd = int(args[0]), int(args[1])
    headless = len(args) >= 4 and args[2] == "--headless"
    up = os.fdopen(up_fd, "wb", 0)
    view = _View(up, headless, parse_size(args[3]) if headless else None)
    try:
        asyncio.run(_serve(view, down))
    except BaseException as e:  # said to the run, which carries on with plain lines
        view.say(f"failed {type(e).__name__}: {' '.join(str(e).split())[:300]}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
