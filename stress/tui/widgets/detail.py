"""One user's recent turns with their timings, opened from the users table.

The summary line says what the user is doing now and for how long (the same age as the
table's state cell), how many of its requests stalled, and the ``X-Request-ID`` of its
last request (in flight, else the last one sent), to find it in the server's log; each
turn shows its longest silence between chunks (``max gap``), so a stream that nearly
stalled is visible too.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from stress.live.state import TurnSummary, UserRow
from stress.tui import format as f
from stress.tui.widgets.users import state_label, state_of

COLUMNS = (
    "round",
    "conv",
    "outcome",
    "prompt",
    "cached",
    "output",
    "TTFT",
    "tok/s",
    "max gap",
    "e2e",
    "ended",
)


def turn_cells(t: TurnSummary) -> tuple[str | Text, ...]:
    outcome = t.error_class or t.outcome
    style = "red" if t.error_class else "green" if t.outcome == "ok" else "yellow"
    cached = (
        f"{f.tokens(t.cached_tokens)} ({f.pct(t.cached_tokens / t.prompt_tokens)})"
        if t.cached_tokens is not None and t.prompt_tokens
        else f.tokens(t.cached_tokens)
    )
    return (
        str(t.round),
        str(t.conversation),
        Text(outcome, style=style),
        f.tokens(t.prompt_tokens),
        cached,
        f.tokens(t.completion_tokens),
        f.secs(t.ttft_s),
        f.rate(t.decode_tok_s),
        f.secs(t.max_gap_s),
        f.secs(t.e2e_s),
        f.clock(t.t_end),
    )


def summary_text(row: UserRow) -> Text:
    t = Text(f"user {row.user}", style="bold")
    state = state_of(row)
    t.append(f" · {state_label(row, state)} · round {row.round} · conversation {row.conversation}")
    t.append(f" ({f.tokens(row.conversation_tokens)} tok)")
    t.append(f" · ok {row.ok} err {row.errors} empty {row.empty}")
    if row.stalls:
        t.append(f" · stalls {row.stalls}", style="red")
    if row.last_error:
        t.append(f" · last error {row.last_error}", style="red")
    if row.last_request_id:
        t.append(f"\nlast request id {row.last_request_id}", style="dim")
    return t


class UserDetail(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,enter,backspace", "dismiss", "Back")]

    def __init__(self, row: UserRow) -> None:
        super().__init__()
        self.user = row.user
        self._row = row
        self._shown: UserRow | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="detail"):
            yield Static(id="detail-summary")
            yield DataTable[str | Text](id="turns", cursor_type="none", show_cursor=False)
            yield Static("esc: back", id="detail-hint")

    def on_mount(self) -> None:
        table = self.query_one("#turns", DataTable)
        table.add_columns(*COLUMNS)
        self.query_one("#detail", Vertical).border_title = f"user {self.user}: recent turns"
        self.show(self._row)

    def show(self, row: UserRow) -> None:
        if row == self._shown:
            return
        self._shown = row
        self.query_one("#detail-summary", Static).update(summary_text(row))
        table: DataTable[str | Text] = self.query_one("#turns", DataTable)
        table.clear()
        for turn in reversed(row.recent):
            table.add_row(*turn_cells(turn))
