"""The Textual app: lays out the widgets and feeds them the latest snapshot, twice a second.

The app owns no run state. A timer pulls one ``Snapshot`` per tick from the ``Feed``, and
each widget compares it with what it shows and repaints only what changed, all inside one
``batch_update`` so a tick costs a single screen refresh. Keys act on the run only through
the feed's callbacks (graceful stop, then cancel).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Static

from stress.live.state import Snapshot
from stress.live.view_process import TICK_S
from stress.tui.feed import Feed
from stress.tui.format import gpu_cards
from stress.tui.widgets.cards import CardsTable
from stress.tui.widgets.detail import UserDetail
from stress.tui.widgets.events import EventLog
from stress.tui.widgets.header import RunHeader
from stress.tui.widgets.help import HelpScreen
from stress.tui.widgets.server import ServerPanel
from stress.tui.widgets.sparks import Sparks
from stress.tui.widgets.users import UsersTable


class StressApp(App[None]):
    CSS_PATH = Path(__file__).with_name("stress.tcss")
    TITLE = "stress"
    ENABLE_COMMAND_PALETTE = False
    # side by side only when the users table (95 cells with its box) fits beside the 60-cell
    # side panel; below that the panels stack and the table keeps its columns
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (150, "-wide")]  # noqa: RUF012 (Textual's type)
    VERTICAL_BREAKPOINTS = [(0, "-short"), (36, "-tall")]  # noqa: RUF012
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "stop", "Stop", priority=True),
        Binding("ctrl+c", "stop", "Stop", show=False, priority=True),
        Binding("question_mark", "help", "Help"),
    ]

    def __init__(self, feed: Feed, *, tick_s: float = TICK_S) -> None:
        super().__init__()
        self.feed = feed
        self.tick_s = tick_s
        self.ready = asyncio.Event()
        """Set once the first screen is up (the view says `ready` then)."""
        self.last: Snapshot | None = None
        self.ticks = 0

    def compose(self) -> ComposeResult:
        yield RunHeader(self.feed.header)
        with Horizontal(id="body"):
            with Vertical(id="main"):
                yield UsersTable()
                yield CardsTable()
                yield Static("GPUs: no telemetry", id="no-gpu")
            with Vertical(id="side"):
                yield ServerPanel()
                yield Sparks()
                yield EventLog()
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(CardsTable).display = False
        self.query_one(UsersTable).focus()
        self.tick()
        self.set_interval(self.tick_s, self.tick)
        self.call_after_refresh(self.ready.set)

    def tick(self) -> None:
        """Render the latest snapshot; each widget skips work when nothing changed."""
        s = self.feed.snapshot()
        self.last = s
        self.ticks += 1
        self.feed.sample(s)
        cards = gpu_cards(s.collectors.get("gpu"))
        with self.batch_update():
            self.query_one(RunHeader).show(s, self.feed.verdict(s))
            self.query_one(UsersTable).show(s.users, s.users_first, s.users_total)
            table = self.query_one(CardsTable)
            if cards:
                table.show(cards)
            if table.display != bool(cards):
                table.display = bool(cards)
                self.query_one("#no-gpu").display = not cards
            self.query_one(ServerPanel).show(s.collectors.get("server"), s.working_set_tokens)
            self.query_one(Sparks).show(s.ttft_recent, s.out_tok_s_history, tuple(self.feed.power))
            lines = self.feed.drain()
            if lines:
                self.query_one(EventLog).add(lines)
            if isinstance(self.screen, UserDetail):
                for row in s.users:
                    if row.user == self.screen.user:
                        self.screen.show(row)

    # --- keys --------------------------------------------------------------------------

    def action_stop(self) -> None:
        message = self.feed.stop()
        self.feed.add_line(message)
        self.notify(message, title="stress", severity="warning", timeout=8)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def on_users_table_window(self, event: UsersTable.Window) -> None:
        self.feed.show_rows((event.first, event.count))

    def on_users_table_selected(self, event: UsersTable.Selected) -> None:
        if self.last is None or isinstance(self.screen, UserDetail):
            return
        for row in self.last.users:
            if row.user == event.user:
                self.push_screen(UserDetail(row))
