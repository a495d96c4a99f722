"""``TuiProcess``: the live view's process, fed over a pipe.

The message framing survives any split of the pipe's reads; and the real child gets the
run's header, snapshots, events and lines (here without a terminal, so the child's sink
shows them as plain lines, which this test reads from the child's own stdout).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from stress.core.events import RunEvent
from stress.core.record import RequestRecord
from stress.live.state import Live, Snapshot
from stress.live.view_process import (
    PENDING,
    TICK_BUDGET,
    Frames,
    Ticks,
    TuiProcess,
    frame,
    parse_rows,
)
from stress.tui.feed import PENDING as FEED_PENDING
from tests.tui.data import HEADER, snapshot


def test_frames_come_back_whole_however_the_pipe_splits_them() -> None:
    messages = [("header", HEADER), ("tick", snapshot(1), ["a line"], 0, {}), ("stop",)]
    data = b"".join(frame(m) for m in messages)
    for size in (1, 2, 3, 7, 64, 1000, len(data)):
        frames = Frames()
        got = []
        for i in range(0, len(data), size):
            got += frames.feed(data[i : i + size])
        assert got == messages, size


def turn(live: Live, user: int, t_end: float) -> None:
    rec = RequestRecord(user=user, conversation=1, round=int(t_end), turn=1, t_start=t_end - 1)
    rec.ttft_s, rec.completion_tokens, rec.request_id = 0.5, int(t_end), f"r{user}-{t_end}"
    live.on_send(rec)
    live.on_record(rec, t_end)


def test_ticks_send_a_users_recent_turns_only_when_they_changed() -> None:
    """What the view rebuilds is the snapshot the run took, tick after tick, though a
    user's recent turns travel only in the tick after one ended; a session that left and
    one that reuses its number with no turns yet come back as they are."""
    live = Live(64)
    for t in range(1, 13):
        for u in range(64):
            turn(live, u, float(t))
    sender, receiver, frames = Ticks(), Ticks(), Frames()
    sizes = []

    def through(snap: Snapshot) -> Snapshot:
        data = sender.encode(snap, ["a line"], 0)
        sizes.append(len(data))
        [(kind, got, items, dropped, changed)] = frames.feed(data)
        assert (kind, items, dropped) == ("tick", ["a line"], 0)
        return receiver.decode(got, changed)

    for snap in (
        live.snapshot(13.0),  # every user's turns, the first time
        live.snapshot(13.25),  # none changed
        (turn(live, 5, 13.4), live.snapshot(13.5))[1],  # one user's
    ):
        snap = dataclasses.replace(snap, events=())
        assert through(snap) == snap
    assert sizes[1] < sizes[0] / 5 and sizes[2] < sizes[1] + 1000
    live.end_session(7)
    live.start_session(7)  # the number again, no turns yet
    snap = dataclasses.replace(live.snapshot(14.0), events=())
    assert through(snap) == snap and snap.users[-1].recent == ()


def test_a_window_of_rows_travels_with_each_users_turns() -> None:
    """The view shows a window of the users' table: a user that scrolls out and back in
    comes back with its recent turns, changed meanwhile or not."""
    live = Live(300)
    for t in range(1, 4):
        for u in range(300):
            turn(live, u, float(t))
    sender, receiver, frames = Ticks(), Ticks(), Frames()

    def through(snap: Snapshot) -> Snapshot:
        [(_, got, _, _, changed)] = frames.feed(sender.encode(snap, [], 0))
        return receiver.decode(got, changed)

    t = 4.0
    for rows in [(0, 60), (0, 60), (200, 60), (20, 60), (0, 60), None, (250, 100)]:
        turn(live, 30, t)  # in some windows, not in others
        snap = dataclasses.replace(live.snapshot(t, rows), events=())
        assert through(snap) == snap, rows
        t += 0.25


def test_the_views_rows_line_names_the_window_the_run_sends() -> None:
    assert parse_rows("rows 40 75") == (40, 75)
    assert parse_rows("rows -") is None
    assert parse_rows("rows 4x 1") is None and parse_rows("rows 1") is None
    asked: list[tuple[int, int] | None] = []

    def source(rows: tuple[int, int] | None = None) -> Snapshot:
        asked.append(rows)
        return snapshot(1)

    view = TuiProcess(HEADER, source, lambda: None, lambda: None)
    view._control("rows 100 90")
    assert view.rows == (100, 90)
    view._control("rows -")
    assert view.rows is None


@pytest.mark.slow
async def test_the_real_view_asks_for_the_rows_it_shows() -> None:
    """The child's table, drawn in a virtual 120x40 screen, says which of 2,000 users'
    rows it shows; the run's next snapshots build only those (a tick at 2,000 users held
    the run's loop 8-23 ms when every row was built and pickled)."""
    live = Live(2000)
    for u in range(2000):
        turn(live, u, 1.0)
    asked: list[tuple[int, int] | None] = []

    def source(rows: tuple[int, int] | None = None) -> Snapshot:
        asked.append(rows)
        return live.snapshot(2.0, rows)

    view = TuiProcess(
        HEADER, source, lambda: None, lambda: None, tick_s=0.05, args=("--headless", "120x40")
    )
    stop = asyncio.Event()
    task = asyncio.create_task(view.run(stop))
    for _ in range(1200):  # up to 60 s: the child's imports, on a busy machine
        if view.ready and asked and asked[-1] is not None:
            break
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(task, 30)
    assert asked[0] is None  # before the view has said: every row
    first, count = asked[-1] or (0, 2000)
    assert first == 0 and 30 <= count <= 120, asked[-1]


@pytest.mark.slow
async def test_the_child_gets_the_events_and_lines_and_stops_when_told(
    capfd: pytest.CaptureFixture[str],
) -> None:
    snap = snapshot(1)
    quits: list[int] = []
    view = TuiProcess(
        HEADER, lambda rows=None: snap, lambda: quits.append(1), lambda: None, tick_s=0.05
    )
    stop = asyncio.Event()
    task = asyncio.create_task(view.run(stop))
    await asyncio.wait_for(view.started.wait(), 60)
    for _ in range(1200):  # up to 60 s: the child's imports, on a busy machine
        if view.ready:
            break
        await asyncio.sleep(0.05)
    assert view.ready
    view.line("a line from the run")
    view.on_event(RunEvent(1.0, "server_restarted", "the server restarted", "error"))
    while view.sent < 3:
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(task, 30)
    assert view.child is not None and view.child.proc.returncode == 0
    out = capfd.readouterr().out
    assert "a line from the run" in out
    assert "the server restarted" in out
    assert quits == []
    view.line("after the view ended")  # straight to the terminal now
    assert "after the view ended" in capfd.readouterr().out


@pytest.mark.slow
async def test_lines_past_the_bound_are_counted_and_shown_as_skipped(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A view that is behind gets the newest lines and a count of the rest: the lines the
    run could not hold and those the view's own log could not are one count."""
    view = TuiProcess(
        HEADER, lambda rows=None: snapshot(1), lambda: None, lambda: None, tick_s=0.05
    )
    for i in range(PENDING + 100):
        view.line(f"line {i}")
    stop = asyncio.Event()
    task = asyncio.create_task(view.run(stop))
    for _ in range(1200):  # up to 60 s: the child's imports, on a busy machine
        if view.ready and view.sent >= 2:
            break
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(task, 30)
    out = capfd.readouterr().out
    total = PENDING + 100  # the run holds PENDING of them, the view's feed FEED_PENDING
    assert f"({total - FEED_PENDING} lines skipped: see events.jsonl)" in out
    first_shown = total - FEED_PENDING
    assert f"line {first_shown - 1}\n" not in out and f"line {first_shown}\n" in out
    assert f"line {total - 1}\n" in out


@pytest.mark.slow
async def test_a_tick_that_takes_long_spaces_the_next_ones_out() -> None:
    """A snapshot that holds the run's loop 20 ms (thousands of users) is sent at most once
    a second (``TICK_BUDGET``: 2 % of the loop), not 20 times a second as asked."""
    snap = snapshot(1)

    def slow(rows: tuple[int, int] | None = None) -> Snapshot:
        time.sleep(0.02)
        return snap

    view = TuiProcess(HEADER, slow, lambda: None, lambda: None, tick_s=0.05)
    stop = asyncio.Event()
    task = asyncio.create_task(view.run(stop))
    for _ in range(1200):  # up to 60 s: the child's imports, on a busy machine
        if view.ready:
            break
        await asyncio.sleep(0.05)
    assert view.ready
    assert view.interval >= 0.02 / TICK_BUDGET
    sent, t0 = view.sent, time.monotonic()
    await asyncio.sleep(3.0)
    ticks = view.sent - sent
    elapsed = time.monotonic() - t0
    stop.set()
    await asyncio.wait_for(task, 30)
    assert 1 <= ticks <= elapsed / (0.02 / TICK_BUDGET) + 1  # 0.05 s apart would be ~60
