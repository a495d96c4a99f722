"""Shared helpers for the TUI tests: a sink over changing snapshots, the screen as text."""

from __future__ import annotations

from dataclasses import dataclass, field

from textual.app import App

from stress.live.state import Snapshot
from stress.tui import TuiSink
from stress.tui.app import StressApp
from tests.tui.data import HEADER, snapshot


@dataclass
class Source:
    """Hands out whatever snapshot the test sets, and counts the stop callbacks."""

    current: Snapshot = field(default_factory=snapshot)
    quits: int = 0
    cancels: int = 0

    def __call__(self) -> Snapshot:
        return self.current

    def quit(self) -> None:
        self.quits += 1

    def cancel(self) -> None:
        self.cancels += 1


def make_app(source: Source, *, events: bool = True) -> StressApp:
    """The app as ``TuiSink`` builds it, with the timer slowed so the test drives ticks."""
    sink = TuiSink(HEADER, source, source.quit, source.cancel, headless=True, tick_s=3600)
    if events:
        for ev in source.current.events:
            sink.on_event(ev)
    return sink.build_app()


def screen_text(app: App[None]) -> str:
    """The composed screen as plain text, one line per terminal row, trailing blanks cut."""
    strips = app.screen._compositor.render_strips()
    return "\n".join(s.text.rstrip() for s in strips) + "\n"
