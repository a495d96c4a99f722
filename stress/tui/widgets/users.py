"""One row per simulated user, repainted line by line under a stable row key.

A one-hour soak refreshes this table thousands of times on the loop the engine runs on.
Textual's DataTable re-renders every visible cell whenever any cell changes (about 50 ms
at 64 users on a small machine), so this is a line-API widget instead: each row's cells
are formatted to plain strings, compared with what is on screen, and only the screen
lines of rows that changed are re-rendered, from a per-row cache of strips.

The state cell carries the age of what the user is doing, so a stall is visible while it
happens: ``1st token 23s`` (sent, no token yet), ``silent 12s`` (streaming, no byte for
that long), ``thinking 4s`` (time left before the next turn). When the table is narrower
than its columns, the least useful columns are left out (``retain`` first) rather than
cropping the row.
"""

from __future__ import annotations

from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from stress.live.state import SILENT_AFTER_S, UserRow
from stress.tui import format as f

# (key, label, width, right-aligned, drop order: 0 = always shown, higher = left out first)
COLUMNS: tuple[tuple[str, str, int, bool, int], ...] = (
    ("user", "user", 4, False, 0),
    ("state", "state", 14, False, 0),
    ("round", "rnd", 4, True, 8),
    ("conv", "conv tok", 8, True, 7),
    ("ttft", "TTFT", 6, True, 4),
    ("tok_s", "tok/s", 5, True, 3),
    ("cached", "cached", 6, True, 5),
    ("retention", "retain", 6, True, 9),
    ("ok", "ok", 3, True, 2),
    ("err", "err", 3, True, 0),
    ("empty", "empty", 5, True, 1),
    ("stall", "stall", 5, True, 6),
)
KEYS = tuple(c[0] for c in COLUMNS)
ALL = tuple(range(len(COLUMNS)))
GAP = "  "
STATE_STYLE = {
    "thinking": Style(dim=True),
    "waiting": Style(color="yellow"),
    "reasoning": Style(color="magenta"),
    "streaming": Style(color="green"),
    "silent": Style(color="red", bold=True),
    "error": Style(color="red", bold=True),
    "done": Style(color="cyan"),
    "starting": Style(dim=True),
}
STATE_LABEL = {"waiting": "1st token", "reasoning": "reasoning", "streaming": "content"}
HEADER_STYLE = Style(bold=True)
CURSOR_STYLE = Style(bgcolor="grey27")
ZEBRA_STYLE = Style(bgcolor="grey11")
RED, YELLOW = Style(color="red", bold=True), Style(color="yellow")


def state_of(row: UserRow) -> str:
    """The state as shown: ``error`` after a failed turn, ``silent`` for a quiet stream."""
    if row.state == "thinking" and row.recent and row.recent[-1].outcome == "error":
        return "error"
    if row.silent_s is not None and row.silent_s >= SILENT_AFTER_S:
        return "silent"
    return row.state


def state_label(row: UserRow, state: str) -> str:
    """``1st token 23s``, ``silent 12s``, ``thinking 4s``, or the plain state."""
    if state == "waiting" and row.first_token_wait_s is not None:
        return f"1st token {f.age(row.first_token_wait_s)}"
    if state == "silent" and row.silent_s is not None:
        return f"silent {f.age(row.silent_s)}"
    if state == "thinking" and row.think_left_s is not None:
        return f"thinking {f.age(row.think_left_s)}"
    return STATE_LABEL.get(state, state)


def user_cells(row: UserRow) -> tuple[str, ...]:
    state = state_of(row)
    live = row.live_tok_s if row.live_tok_s is not None else row.last_decode_tok_s
    return (
        f"u{row.user}",
        state_label(row, state),
        str(row.round),
        f.tokens(row.conversation_tokens),
        f.secs(row.last_ttft_s),
        f.rate(live),
        f.pct(row.last_cached_pct, ratio=False),
        f.pct(row.last_retention),
        str(row.ok),
        str(row.errors),
        str(row.empty),
        str(row.stalls),
    )


def cell_style(key: str, value: str, state: str) -> Style | None:
    if key == "state":
        return STATE_STYLE.get(state)
    if key in ("err", "stall") and value != "0":
        return RED
    if key == "empty" and value != "0":
        return YELLOW
    return None


def table_width(columns: tuple[int, ...]) -> int:
    return 1 + sum(COLUMNS[i][2] for i in columns) + len(GAP) * (len(columns) - 1)


def fit_columns(width: int) -> tuple[int, ...]:
    """The columns that fit in ``width`` cells, leaving out the most droppable first."""
    shown = list(ALL)
    by_drop = sorted((c for c in ALL if COLUMNS[c][4]), key=lambda c: -COLUMNS[c][4])
    for c in by_drop:
        if table_width(tuple(shown)) <= width:
            break
        shown.remove(c)
    return tuple(shown)


def line_segments(
    cells: tuple[str, ...], state: str | None, columns: tuple[int, ...] = ALL
) -> list[Segment]:
    """One table line; ``state`` None means the header."""
    out: list[Segment] = [Segment(" ")]
    for n, i in enumerate(columns):
        key, _, width, right, _ = COLUMNS[i]
        value = cells[i]
        text = value[:width].rjust(width) if right else value[:width].ljust(width)
        style = HEADER_STYLE if state is None else cell_style(key, value, state)
        if n:
            out.append(Segment(GAP))
        out.append(Segment(text, style))
    return out


HEADER = tuple(c[1] for c in COLUMNS)
TABLE_WIDTH = table_width(ALL)


class UsersTable(ScrollView, can_focus=True):
    """Up/down move the cursor; enter (or a click) posts ``UsersTable.Selected``."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor(-1)", "Up", show=False),
        Binding("down", "cursor(1)", "Down", show=False),
        Binding("pageup", "cursor(-10)", show=False),
        Binding("pagedown", "cursor(10)", show=False),
        Binding("enter", "select", "User detail"),
    ]
    cursor: reactive[int] = reactive(0)

    class Window(Message):
        """The rows the table shows, or may show next (first, count): the screen, a
        screen above and below it, and the cursor's row. The run sends only these."""

        def __init__(self, first: int, count: int) -> None:
            super().__init__()
            self.first = first
            self.count = count

    class Selected(Message):
        def __init__(self, user: int) -> None:
            super().__init__()
            self.user = user

    def __init__(self) -> None:
        super().__init__(id="users")
        self.users: list[int | None] = []
        """The user at each row (None: a row not sent yet, outside the shown window)."""
        self._asked: tuple[int, int] | None = None
        """The rows last asked for (``Window``)."""
        self._window_rows = range(0)
        """The rows the last snapshot held."""
        self.cells: dict[int, tuple[str, ...]] = {}
        self._states: dict[int, str] = {}
        self._strips: dict[int, Strip] = {}
        self.columns: tuple[int, ...] = ALL
        """The columns shown (indices into ``COLUMNS``): as many as the width allows."""
        self.border_title = "users"

    @property
    def row_count(self) -> int:
        return len(self.users)

    def show(self, rows: tuple[UserRow, ...], first: int = 0, total: int | None = None) -> None:
        """Write the rows that changed; the others are not touched. ``rows`` may be a
        window of the run's ``total`` users, starting at row ``first``."""
        total = len(rows) if total is None else total
        if total != len(self.users):
            self.users = (self.users + [None] * total)[:total]
            self.virtual_size = Size(table_width(self.columns), total + 1)
            self.refresh()
        self._fit()
        window = range(first, min(first + len(rows), total))
        for i in self._window_rows:  # rows the last tick had and this one has not: blank
            if i not in window and i < total and self.users[i] is not None:
                self.users[i] = None  # not stale figures shown as today's
                self._strips.pop(i, None)
                self._refresh_row(i)
        self._window_rows = window
        for i, row in enumerate(rows, first):
            if i >= total:
                break
            cells = user_cells(row)
            if self.users[i] != row.user or self.cells.get(row.user) != cells:
                self.users[i] = row.user
                self.cells[row.user] = cells
                self._states[row.user] = state_of(row)
                self._strips.pop(i, None)
                self._refresh_row(i)
        self._say_window()

    def _say_window(self) -> None:
        """Post ``Window`` when the rows the table may show have changed."""
        height = max(1, self.size.height - 1)
        top = round(self.scroll_offset.y)
        start = max(0, min(top - height, self.cursor))
        end = max(top + 2 * height, self.cursor + 1)
        window = (start, end - start)
        if window != self._asked:
            self._asked = window
            self.post_message(self.Window(*window))

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self._say_window()

    def _fit(self) -> None:
        """Choose the columns for the current width; repaint everything only if they change."""
        columns = fit_columns(self.scrollable_content_region.width)
        if columns != self.columns:
            self.columns = columns
            self._strips.clear()
            self.virtual_size = Size(table_width(columns), len(self.users) + 1)
            self.refresh()

    def on_resize(self) -> None:
        self._fit()
        self._say_window()

    def _refresh_row(self, index: int) -> None:
        y = index + 1 - self.scroll_offset.y
        if 1 <= y < self.size.height:
            self.refresh(Region(0, y, self.size.width, 1))

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if y == 0:
            strip = Strip(line_segments(HEADER, None, self.columns))
        else:
            index = y - 1 + self.scroll_offset.y
            if index >= len(self.users):
                return Strip.blank(width, self.rich_style)
            strip = self._strips.get(index) or self._row_strip(index)
            if index == self.cursor:
                strip = strip.apply_style(CURSOR_STYLE if self.has_focus else ZEBRA_STYLE)
        x = self.scroll_offset.x
        return strip.crop(x, x + width).extend_cell_length(width).apply_style(self.rich_style)

    def _row_strip(self, index: int) -> Strip:
        user = self.users[index]
        if user is None:  # not sent yet: it comes with the next tick after a scroll
            return Strip.blank(table_width(self.columns))
        strip = Strip(line_segments(self.cells[user], self._states[user], self.columns))
        self._strips[index] = strip
        return strip

    def watch_cursor(self, old: int, new: int) -> None:
        self._refresh_row(old)
        self._refresh_row(new)
        # keep the cursor in view (line 0 is the header)
        top = self.scroll_offset.y
        visible = max(1, self.size.height - 1)
        if new < top:
            self.scroll_to(y=new, animate=False)
        elif new >= top + visible:
            self.scroll_to(y=new - visible + 1, animate=False)

    def on_focus(self) -> None:
        self._refresh_row(self.cursor)

    def on_blur(self) -> None:
        self._refresh_row(self.cursor)

    def action_cursor(self, delta: int) -> None:
        if self.users:
            self.cursor = max(0, min(len(self.users) - 1, self.cursor + delta))

    def action_select(self) -> None:
        user = self.users[self.cursor] if 0 <= self.cursor < len(self.users) else None
        if user is not None:
            self.post_message(self.Selected(user))

    def on_click(self, event: object) -> None:
        y = getattr(event, "y", 0)
        index = y - 1 + self.scroll_offset.y
        if y >= 1 and 0 <= index < len(self.users):
            self.cursor = index
            self.action_select()
