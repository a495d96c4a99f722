"""The TUI fed by the real ``Live`` state: ages in the users table, the event panel under a
flood of per-request events, run-level failures at once and in the badge.

The app is built by ``TuiSink`` as in a run; its snapshot source is ``Live.snapshot`` over
real in-flight records, and events go through ``TuiSink.on_event`` like the run's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stress.core.events import RunEvent
from stress.core.record import RequestRecord
from stress.live.state import Live
from stress.live.throttle import REQUEST_LINES
from stress.tui import TuiSink
from stress.tui.app import StressApp
from stress.tui.widgets.detail import UserDetail
from stress.tui.widgets.header import RunHeader
from tests.tui.data import HEADER
from tests.tui.helpers import screen_text


@dataclass
class Run:
    """A live state, a run clock the test moves, and the sink the run would use."""

    live: Live = field(default_factory=lambda: Live(4))
    t: float = 20.0

    def __post_init__(self) -> None:
        self.sink = TuiSink(
            HEADER,
            lambda: self.live.snapshot(self.t),
            lambda: None,
            lambda: None,
            headless=True,
            tick_s=3600,
        )

    def send(self, user: int, t_start: float) -> RequestRecord:
        rec = RequestRecord(user=user, conversation=1, round=1, turn=1, t_start=t_start)
        self.live.on_send(rec)
        return rec

    def app(self) -> StressApp:
        return self.sink.build_app()


def user_line(text: str, user: int) -> str:
    return next(line for line in text.splitlines() if f" u{user} " in line)


async def test_ages_show_while_a_request_waits_or_a_stream_is_silent() -> None:
    run = Run()
    run.send(0, t_start=10.0)  # no first token yet
    silent = run.send(1, t_start=5.0)
    silent.ttft_s, silent.chunks_content, silent.t_last_byte = 1.0, 30, 8.0
    flowing = run.send(2, t_start=5.0)
    flowing.ttft_s, flowing.chunks_content, flowing.t_last_byte = 1.0, 30, 19.8
    run.live.set_state(3, "thinking", until=26.0)
    app = run.app()
    for size in ((80, 24), (120, 40), (200, 50)):
        async with app.run_test(size=size) as pilot:
            app.tick()
            await pilot.pause()
            text = screen_text(app)
            assert "1st token 10s" in user_line(text, 0), size
            assert "silent 12s" in user_line(text, 1), size
            assert "content" in user_line(text, 2), size
            assert "thinking 6s" in user_line(text, 3), size
            assert max(len(line) for line in text.splitlines()) <= size[0]
            # the clock moves, nothing arrives: the next tick shows the longer wait
            run.t += 30
            app.tick()
            await pilot.pause()
            text = screen_text(app)
            assert "1st token 40s" in user_line(text, 0) and "silent 42s" in user_line(text, 1)
            run.t -= 30
        app = run.app()


async def test_stalls_per_user_in_the_row_and_the_detail() -> None:
    run = Run()
    for cls in ("stall", "first_token_timeout"):
        rec = run.send(2, 1.0)
        rec.outcome, rec.error_class, rec.max_gap_s = "error", cls, 121.5
        run.live.on_record(rec, 5.0)
    app = run.app()
    async with app.run_test(size=(120, 40)) as pilot:
        app.tick()
        await pilot.pause()
        assert user_line(screen_text(app), 2).strip("│ ").split()[-1] == "2"  # the stall column
        await pilot.press("down", "down", "enter")
        await pilot.pause()
        assert isinstance(app.screen, UserDetail)
        text = screen_text(app)
        assert "stalls 2" in text and "max gap" in text and "2m02s" in text


async def test_the_detail_shows_the_last_request_id() -> None:
    """The id the server logged (X-Request-ID): the request in flight, else the last one."""
    run = Run()
    done = run.send(1, 1.0)
    done.request_id = "ab12cd34ef-u1-r1"
    run.live.on_record(done, 5.0)
    app = run.app()
    async with app.run_test(size=(120, 40)) as pilot:
        app.tick()
        await pilot.pause()
        await pilot.press("down", "enter")
        await pilot.pause()
        assert isinstance(app.screen, UserDetail)
        assert "last request id ab12cd34ef-u1-r1" in screen_text(app)
    flying = run.send(1, 6.0)
    flying.request_id = "ab12cd34ef-u1-r2-a2"  # re-sent on a fresh connection
    assert run.live.snapshot(7.0).users[1].last_request_id == "ab12cd34ef-u1-r2-a2"
    run.live.on_record(flying, 8.0)
    row = run.live.snapshot(9.0).users[1]
    assert row.last_request_id == "ab12cd34ef-u1-r2-a2"
    assert [t.request_id for t in row.recent] == ["ab12cd34ef-u1-r1", "ab12cd34ef-u1-r2-a2"]


async def test_request_event_flood_is_summarised_and_run_failures_shown_at_once() -> None:
    run = Run()
    for i in range(60):
        run.sink.on_event(RunEvent(10.0 + i / 100, "request_failed", f"HTTP 503 #{i}", "warning"))
    run.sink.on_event(RunEvent(10.7, "recorder_failed", "requests.jsonl: disk full", "error"))
    run.sink.on_event(RunEvent(10.8, "collector_failed", "gpu collector died", "error"))
    app = run.app()
    async with app.run_test(size=(160, 50)) as pilot:
        app.tick()
        await pilot.pause()
        text = screen_text(app)
        assert sum(1 for line in text.splitlines() if "HTTP 503 #" in line) == REQUEST_LINES
        assert f"... and {60 - REQUEST_LINES} more (request_failed {60 - REQUEST_LINES})" in text
        assert "FAIL requests.jsonl: disk full" in text
        assert "FAIL gpu collector died" in text
        assert app.last is not None
        verdict = app.feed.verdict(app.last)
        assert verdict.level == "bad"
        assert verdict.reasons == ("recorder failed", "1 dead collector")
        assert "recorder failed" in app.query_one(RunHeader)._badge


async def test_a_time_scaled_run_shows_simulated_seconds_and_says_so() -> None:
    run = Run(live=Live(4, time_scale=10.0))  # the run clock, records and events: wall seconds
    run.send(0, t_start=10.0)
    silent = run.send(1, t_start=5.0)
    silent.ttft_s, silent.chunks_content, silent.t_last_byte = 1.0, 30, 8.0
    run.live.set_state(3, "thinking", until=26.0)
    run.sink.on_event(RunEvent(3.0, "preflight", "server said something", "warning"))
    for i in range(20):  # a flood still shows REQUEST_LINES per wall second, not per sim second
        run.sink.on_event(RunEvent(10.0 + i / 100, "request_failed", f"HTTP 503 #{i}", "warning"))
    app = run.app()
    async with app.run_test(size=(160, 50)) as pilot:
        app.tick()
        await pilot.pause()
        text = screen_text(app)
        assert "3:20 / 10:00:00 (9:56:40 left) · simulated time x10" in text
        assert "1st token 100s" in user_line(text, 0) and "silent 120s" in user_line(text, 1)
        assert "thinking 60s" in user_line(text, 3)
        assert "0:30 engine WARN server said something" in text
        assert "1:40 engine WARN HTTP 503 #0" in text
        assert sum(1 for line in text.splitlines() if "HTTP 503 #" in line) == REQUEST_LINES
    plain = Run()
    app = plain.app()
    async with app.run_test(size=(160, 50)) as pilot:
        app.tick()
        await pilot.pause()
        text = screen_text(app)
        assert "0:20 / 1:00:00 (59:40 left) · requests" in text and "simulated" not in text
