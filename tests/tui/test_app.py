"""The app under Pilot: one row per user, updates in place, keys reach the run."""

from __future__ import annotations

from dataclasses import replace

from textual.widgets import DataTable

from stress.tui import TuiSink
from stress.tui.feed import CANCELLING, STOPPING
from stress.tui.widgets.detail import UserDetail
from stress.tui.widgets.help import HelpScreen
from stress.tui.widgets.users import UsersTable
from tests.tui.data import HEADER, snapshot
from tests.tui.helpers import Source, make_app, screen_text


async def test_one_row_per_user_updated_in_place() -> None:
    source = Source(snapshot(n_users=12))
    app = make_app(source)
    async with app.run_test(size=(160, 50)) as pilot:
        table = app.query_one(UsersTable)
        assert table.row_count == 12
        assert table.users == list(range(12))
        assert table.cells[3][2] == "4"  # round
        repainted: list[int] = []
        original = table._refresh_row

        def spy(index: int) -> None:
            repainted.append(index)
            original(index)

        table._refresh_row = spy  # type: ignore[method-assign]
        app.tick()  # same snapshot again: nothing to repaint
        assert repainted == []
        users = list(source.current.users)
        users[3] = replace(users[3], round=9, ok=7)
        source.current = replace(source.current, users=tuple(users))
        app.tick()
        await pilot.pause()
        assert repainted == [3]  # one line, not the table
        assert table.cells[3][2] == "9" and table.cells[3][8] == "7"
        assert table.row_count == 12
        line = next(x for x in screen_text(app).splitlines() if "│ u3 " in x)
        assert line.split()[3:5] == ["9", "16k"], line
        assert "u11" in screen_text(app)


async def test_new_snapshots_reach_header_server_and_cards() -> None:
    source = Source(snapshot(0))
    app = make_app(source)
    async with app.run_test(size=(160, 50)) as pilot:
        assert "req 32 ·" in screen_text(app)  # compact beside the badge's reasons
        source.current = snapshot(5)
        app.tick()
        await pilot.pause()
        text = screen_text(app)
        assert "req 37 ·" in text
        assert "IDLE" in text and "220/220W" in text
        assert "working set" in text and "/431k" in text


async def test_q_stops_gracefully_then_cancels() -> None:
    source = Source()
    app = make_app(source)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("q")
        assert (source.quits, source.cancels) == (1, 0)
        app.tick()
        await pilot.pause()
        assert STOPPING[:30] in screen_text(app)
        await pilot.press("ctrl+c")
        assert (source.quits, source.cancels) == (1, 1)
        assert app.feed.stops == 2
        app.tick()
        await pilot.pause()
        assert CANCELLING[:30] in screen_text(app)
        assert app.is_running  # the app stays up until the run ends


async def test_enter_opens_user_detail_and_escape_closes() -> None:
    source = Source()
    app = make_app(source)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("down", "down", "enter")
        await pilot.pause()
        assert isinstance(app.screen, UserDetail)
        assert app.screen.user == 2
        turns = app.screen.query_one("#turns", DataTable)
        assert turns.row_count == 3
        assert "user 2: recent turns" in screen_text(app)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, UserDetail)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        assert "stop gracefully" in screen_text(app)


async def test_missing_gpu_fields_show_dashes_and_no_gpu_line() -> None:
    bare = snapshot()
    bare = replace(bare, collectors={"gpu": {"cards": [{"name": "Arc B70"}]}})
    app = make_app(Source(bare), events=False)
    async with app.run_test(size=(160, 50)):
        text = screen_text(app)
        row = next(line for line in text.splitlines() if "Arc B70" in line)
        assert row.count(" - ") >= 6, row
        assert "no server metrics" in text
    app = make_app(Source(snapshot(gpus=False)), events=False)
    async with app.run_test(size=(160, 50)):
        assert "GPUs: no telemetry" in screen_text(app)


async def test_the_table_shows_a_window_of_rows_and_says_which() -> None:
    """With thousands of users the run sends only the rows the table may show: the table
    puts them at their rows, says which rows it needs when it scrolls, and a row not sent
    yet is blank until the next tick brings it."""
    full = snapshot(n_users=500)
    said: list[tuple[int, int] | None] = []
    current = [full]  # the first ticks, before the view has said: every row
    sink = TuiSink(
        HEADER,
        lambda: current[0],
        lambda: None,
        lambda: None,
        headless=True,
        tick_s=3600,
        on_rows=said.append,
    )
    app = sink.build_app()
    async with app.run_test(size=(160, 50)) as pilot:
        table = app.query_one(UsersTable)
        await pilot.pause()
        assert table.users == list(range(500))
        current[0] = replace(full, users=full.users[:60], users_first=0, users_total=500)
        app.tick()
        await pilot.pause()
        assert table.row_count == 500
        assert table.users[:60] == list(range(60)) and table.users[60:] == [None] * 440
        assert said and said[-1] is not None
        first, count = said[-1]
        assert first == 0 and count < 100
        table.scroll_to(y=300, animate=False)
        await pilot.pause()
        assert said[-1] is not None
        first, count = said[-1]
        assert first <= 300 and 300 + table.size.height <= first + count
        assert "u300 " not in screen_text(app)  # not sent yet: blank, not stale
        window = full.users[first : first + count]
        current[0] = replace(full, users=window, users_first=first, users_total=500)
        app.tick()
        await pilot.pause()
        assert "│ u300 " in screen_text(app)
        assert table.users[first : first + count] == [r.user for r in window]
        assert set(table.users[:first] + table.users[first + count :]) == {None}
