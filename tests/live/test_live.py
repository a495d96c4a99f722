"""The live state and the headless printer, fed real records and real run events.

Ages are computed at snapshot time from the in-flight record's own timestamps (the client
updates ``ttft_s`` and ``t_last_byte`` in place), so a stall is visible while it happens;
the printer names the longest waits in its status line, prints run-level failures at once
and per-request events at most ``REQUEST_LINES`` per interval.
"""

from __future__ import annotations

import asyncio
import io

from stress.core.events import RunEvent
from stress.core.record import RequestRecord
from stress.live.headless import HeadlessPrinter
from stress.live.state import Live
from stress.live.throttle import REQUEST_LINES


def sent(live: Live, user: int, t_start: float) -> RequestRecord:
    rec = RequestRecord(user=user, conversation=1, round=1, turn=1, t_start=t_start)
    live.on_send(rec)
    return rec


def streaming(live: Live, user: int, t_start: float, ttft: float, last_byte: float) -> None:
    rec = sent(live, user, t_start)
    rec.ttft_s, rec.chunks_content, rec.t_last_byte = ttft, 40, last_byte


def test_ages_come_from_the_in_flight_record_at_snapshot_time() -> None:
    live = Live(4)
    sent(live, 0, t_start=10.0)  # no token yet
    streaming(live, 1, t_start=5.0, ttft=1.0, last_byte=8.0)  # quiet since 8.0
    streaming(live, 2, t_start=5.0, ttft=1.0, last_byte=19.9)  # flowing
    live.set_state(3, "thinking", until=24.5)
    u = live.snapshot(20.0).users
    assert u[0].state == "waiting" and u[0].first_token_wait_s == 10.0 and u[0].silent_s is None
    assert u[1].state == "streaming" and u[1].silent_s == 12.0 and u[1].first_token_wait_s is None
    assert u[1].live_tok_s is not None
    assert u[2].silent_s is not None and u[2].silent_s < 0.2
    assert u[3].think_left_s == 4.5
    later = live.snapshot(50.0).users  # nothing arrived: the ages grow, nothing else needed
    assert later[0].first_token_wait_s == 40.0 and later[1].silent_s == 42.0
    assert later[3].think_left_s == 0.0


def test_stalls_are_counted_per_user_and_turns_keep_their_longest_gap() -> None:
    live = Live(2)
    for cls in ("stall", "first_token_timeout", "http_5xx"):
        rec = sent(live, 1, 1.0)
        rec.outcome, rec.error_class = "error", cls
        live.on_record(rec, 5.0)
    rec = sent(live, 0, 1.0)
    rec.ttft_s, rec.max_gap_s, rec.completion_tokens = 0.5, 7.25, 10
    live.on_record(rec, 9.0)
    u = live.snapshot(10.0).users
    assert (u[0].stalls, u[1].stalls, u[1].errors) == (0, 2, 3)
    assert u[0].recent[-1].max_gap_s == 7.25
    assert u[0].silent_s is None and u[0].first_token_wait_s is None  # nothing in flight


async def run_printer(printer: HeadlessPrinter, out: io.StringIO, lines: int) -> None:
    """Run the printer until it has printed ``lines`` status lines, then stop it."""
    stop = asyncio.Event()
    task = asyncio.create_task(printer.run(stop))
    while out.getvalue().count("| requests") < lines:
        await asyncio.sleep(printer.interval_s)
    stop.set()
    await asyncio.wait_for(task, 10)


async def test_status_line_names_the_longest_waits() -> None:
    live = Live(6)
    sent(live, 0, t_start=10.0)  # 1st token 10 s
    streaming(live, 1, t_start=5.0, ttft=1.0, last_byte=8.0)  # silent 12 s
    streaming(live, 2, t_start=5.0, ttft=1.0, last_byte=19.5)  # fine
    sent(live, 3, t_start=19.0)  # 1 s: normal, not named
    sent(live, 4, t_start=2.0)  # 18 s
    sent(live, 5, t_start=3.0)  # 17 s
    out = io.StringIO()
    printer = HeadlessPrinter(lambda: live.snapshot(20.0), 60.0, interval_s=0.01, stream=out)
    await asyncio.wait_for(run_printer(printer, out, 1), 10)
    status = out.getvalue().splitlines()[0]
    assert "longest waits: u4 1st token 18s, u5 1st token 17s, u1 silent 12s, +1 more" in status


async def test_request_events_are_rate_limited_and_run_failures_are_not() -> None:
    live = Live(2)
    out = io.StringIO()
    printer = HeadlessPrinter(lambda: live.snapshot(30.0), 60.0, interval_s=0.01, stream=out)
    for i in range(40):
        kind = ("request_failed", "empty_reply", "stall")[i % 3]
        printer.on_event(RunEvent(1.0 + i / 10, kind, f"request {i} went wrong", "warning", user=1))
    printer.on_event(
        RunEvent(6.0, "recorder_failed", "cannot write requests.jsonl: disk full", "error")
    )
    printer.on_event(RunEvent(6.5, "user_crashed", "user 0 stopped: boom", "error", user=0))
    printer.on_event(RunEvent(6.6, "record_failed", "user 1 round 3: stress failed", "error"))
    early = out.getvalue().splitlines()
    assert len(early) == REQUEST_LINES + 3  # five request lines, the failures at once
    assert "ERROR: cannot write requests.jsonl: disk full" in early[-3]
    assert "u0 user 0 stopped" in early[-2] and "user 1 round 3: stress failed" in early[-1]
    await asyncio.wait_for(run_printer(printer, out, 1), 10)
    lines = out.getvalue().splitlines()
    held = next(line for line in lines if "... and" in line)
    assert "... and 35 more (empty_reply 11, request_failed 12, stall 12)" in held
    status = next(line for line in lines if "| requests" in line)
    assert "RECORDER FAILED" in status and "1 user CRASHED" in status
    assert "1 record FAILED" in status
    # a new interval, a new budget: the next request event is printed again
    printer.on_event(RunEvent(7.0, "stall", "no bytes for 120s", "error", user=1))
    assert out.getvalue().splitlines()[-1].endswith("ERROR: u1 no bytes for 120s")


def test_the_printer_holds_counts_not_events() -> None:
    out = io.StringIO()
    printer = HeadlessPrinter(lambda: Live(1).snapshot(1.0), None, stream=out)
    for i in range(10_000):
        printer.on_event(RunEvent(float(i), "request_failed", "HTTP 503", "warning", user=0))
    assert len(out.getvalue().splitlines()) == REQUEST_LINES
    assert printer._requests.held == {"request_failed": 10_000 - REQUEST_LINES}


def drive(live: Live) -> Live:
    """The same run on any live state: three users in flight, one turn done, one event,
    the server collector's live view; the records' times are wall seconds, as the client's."""
    sent(live, 0, t_start=10.0)  # no token yet
    streaming(live, 1, t_start=5.0, ttft=1.0, last_byte=8.0)  # quiet since 8.0
    done = sent(live, 2, t_start=2.0)
    done.ttft_s, done.decode_tok_s, done.e2e_s, done.max_gap_s = 0.5, 30.0, 4.0, 0.25
    done.completion_tokens = 120
    live.on_record(done, 6.0)
    live.set_state(2, "thinking", until=24.5)
    live.on_event(RunEvent(3.0, "preflight", "a warning", "warning", source="server"))
    live.collectors["server"] = {"gen_tok_s": 600.0, "preemptions_per_min": 6.0, "kv_usage": 0.5}
    return live


def test_a_time_scaled_run_is_shown_in_simulated_seconds() -> None:
    wall, sim = drive(Live(3)).snapshot(20.0), drive(Live(3, time_scale=10.0)).snapshot(20.0)
    assert (wall.t, sim.t) == (20.0, 200.0)
    assert (wall.clock_label, sim.clock_label) == ("", "simulated time x10")
    w, s = wall.users, sim.users
    assert s[0].first_token_wait_s == 10 * w[0].first_token_wait_s == 100.0
    assert s[1].silent_s == 10 * w[1].silent_s == 120.0
    assert w[1].live_tok_s and s[1].live_tok_s == w[1].live_tok_s / 10
    assert s[2].think_left_s == 10 * w[2].think_left_s == 45.0
    assert (s[2].last_ttft_s, s[2].last_decode_tok_s) == (5.0, 3.0)
    turn = s[2].recent[-1]
    assert (turn.t_end, turn.ttft_s, turn.decode_tok_s, turn.e2e_s, turn.max_gap_s) == (
        60.0,
        5.0,
        3.0,
        40.0,
        2.5,
    )
    assert sim.ttft_p50_recent == 5.0 and sim.ttft_recent == (5.0,)
    assert sim.out_tok_s_recent == wall.out_tok_s_recent / 10 == 120 / 20 / 10
    assert sim.out_tok_s_history == tuple(v / 10 for v in wall.out_tok_s_history)
    assert sim.events[-1].t == 30.0 and wall.events[-1].t == 3.0
    assert sim.collectors["server"] == {
        "gen_tok_s": 60.0,
        "preemptions_per_min": 0.6,
        "kv_usage": 0.5,
    }
    assert wall.collectors["server"]["gen_tok_s"] == 600.0


def test_the_headless_printer_shows_a_time_scaled_run_in_simulated_seconds() -> None:
    live = drive(Live(3, time_scale=10.0))
    out = io.StringIO()
    printer = HeadlessPrinter(lambda: live.snapshot(20.0), 40.0, stream=out)  # 40 wall s
    printer.on_event(RunEvent(3.0, "stall", "no bytes", "error", user=1))
    assert out.getvalue().splitlines()[-1] == "[   30s] ERROR: u1 no bytes"
    status = printer.status(live.snapshot(20.0))
    assert status.startswith("[ 3m20s / 6m40s] starting (simulated time x10) |")
    assert "longest waits: u1 silent 2m00s, u0 1st token 100s" in status
    plain = HeadlessPrinter(lambda: drive(Live(3)).snapshot(20.0), 40.0, stream=out)
    assert plain.status(plain.snapshot()).startswith("[   20s / 40s] starting |")


def finished(
    live: Live, user: int, t_end: float, completion: int, prompt: int, cached: int | None
) -> None:
    rec = RequestRecord(
        user=user,
        conversation=1,
        round=1,
        turn=1,
        t_start=t_end - 1.0,
        prompt_tokens=prompt,
        cached_tokens=cached,
        completion_tokens=completion,
    )
    live.on_send(rec)
    live.on_record(rec, t_end)


def test_the_recent_window_counts_every_request_however_many_end() -> None:
    """2,000 requests a second for 90 s: the last 60 s's output rate and cached share are
    every request's, not the last few thousand's spread over the window."""
    live = Live(2000)
    for tick in range(90 * 10):  # 200 requests every 0.1 s
        t = tick / 10
        for u in range(200):
            finished(live, u, t, completion=10, prompt=100, cached=25 if t >= 60 else 0)
    snap = live.snapshot(90.0)
    # the window is [30, 90]: whole seconds 30..89 hold 2,000 requests each
    assert snap.out_tok_s_recent == 60 * 2000 * 10 / 60.0
    assert snap.cached_share_recent == (30 * 2000 * 25) / (60 * 2000 * 100)
    early = Live(200)  # before a minute: over the time so far
    for tick in range(10):
        for u in range(200):
            finished(early, u, tick / 10, completion=10, prompt=100, cached=0)
    assert early.snapshot(0.95).out_tok_s_recent == 10 * 200 * 10 / 0.95


def test_records_a_little_out_of_order_keep_the_window_whole() -> None:
    """Workers' records cross each second's boundary back and forth: a minute of them
    is still a minute in the window, and the sparkline's history, counted once."""
    live = Live(8)
    ends = [s + f for s in range(100) for f in (0.95, 0.05, 0.99, 0.01, 0.5)]
    ends = [t + (0.1 if i % 2 else -0.1) for i, t in enumerate(ends)]  # jittered across
    for i, t in enumerate(ends):
        finished(live, i % 8, t, completion=1, prompt=10, cached=0)
    snap = live.snapshot(100.0)
    in_window = sum(1 for t in ends if t >= 40)  # the whole seconds 40..99
    assert snap.out_tok_s_recent == in_window / 60.0
    # and the sparkline's 5 s buckets hold every token once, when complete
    history = live.snapshot(105.0).out_tok_s_history
    assert round(sum(history) * Live.BUCKET_S) == len(ends)


def test_the_sparklines_latest_output_rate_is_a_complete_bucket() -> None:
    """The bucket still filling is not shown: 10 tokens a second for 12 s read 10 tok/s in
    each complete 5 s bucket, not 2/5 of it for the bucket two seconds old."""
    live = Live(1)
    for s in range(12):
        finished(live, 0, s + 0.5, completion=10, prompt=10, cached=0)
    assert live.snapshot(4.9).out_tok_s_history == ()
    assert live.snapshot(12.0).out_tok_s_history == (10.0, 10.0)
    assert live.snapshot(15.0).out_tok_s_history == (10.0, 10.0, 4.0)


def test_a_users_recent_turns_are_shared_by_snapshots_until_a_turn_ends() -> None:
    live = Live(1)
    for i in range(12):
        finished(live, 0, float(i), completion=i, prompt=100, cached=0)
    a, b = live.snapshot(12.0).users[0].recent, live.snapshot(12.5).users[0].recent
    assert a is b and [t.completion_tokens for t in a] == list(range(2, 12))
    finished(live, 0, 13.0, completion=99, prompt=100, cached=0)
    c = live.snapshot(13.5).users[0].recent
    assert c is not a and [t.completion_tokens for t in c] == [*range(3, 12), 99]


def test_a_snapshot_of_a_window_of_rows_keeps_the_whole_runs_figures() -> None:
    """The live view asks for the rows it shows (``rows``: first, count); the figures
    (counts, the working set) are still every user's."""
    live = Live(100)
    for u in range(100):
        rec = RequestRecord(user=u, conversation=1, round=1, turn=1, t_start=0.0)
        rec.conversation_tokens = 10 * u
        live.on_send(rec)
    whole = live.snapshot(1.0)
    part = live.snapshot(1.0, (40, 25))
    assert [r.user for r in part.users] == list(range(40, 65))
    assert (part.users_first, part.users_total) == (40, 100)
    assert (whole.users_first, whole.users_total, len(whole.users)) == (0, None, 100)
    assert part.users == whole.users[40:65]
    assert part.working_set_tokens == whole.working_set_tokens == sum(10 * u for u in range(100))
    assert part.in_flight == whole.in_flight == 100
    end = live.snapshot(1.0, (95, 25))  # past the last user: what there is
    assert [r.user for r in end.users] == list(range(95, 100)) and end.users_total == 100
    assert live.snapshot(1.0, (500, 10)).users == ()


def test_a_record_written_after_the_users_next_send_leaves_that_request_in_flight() -> None:
    """The engine writes an ``ok`` request's record once the loop turns, after the user's
    next request went out (``LoadModel._finish`` with ``defer``): the row keeps the new one."""
    live = Live(1)
    first = sent(live, 0, t_start=1.0)
    first.outcome, first.round = "ok", 1
    second = RequestRecord(user=0, conversation=1, round=2, turn=2, t_start=2.0)
    live.on_send(second)
    live.on_record(first, 2.0)
    [row] = live.snapshot(2.5).users
    assert (row.round, row.ok, row.state) == (2, 1, "waiting")
    assert live.in_flight == 1 and live._users[0].in_flight is second
    live.on_record(second, 3.0)
    assert live.in_flight == 0 and live._users[0].in_flight is None


def test_the_live_counts_keep_cancelled_requests_apart_from_errors() -> None:
    """The status line and the view's header count a cancelled request as the verdict
    does: not an error, a cancellation."""
    live = Live(2)
    for user, outcome, cls in ((0, "error", "cancelled"), (1, "error", "reset")):
        rec = sent(live, user, 0.0)
        rec.outcome, rec.error_class = outcome, cls
        live.on_record(rec, 1.0)
    snap = live.snapshot(2.0)
    assert (snap.errors, snap.cancelled) == (1, 1)
    printer = HeadlessPrinter(lambda: live.snapshot(2.0), 40.0, stream=io.StringIO())
    assert "ok 0, err 1, cancelled 1, empty 0" in printer.status(snap)


def test_the_recent_cached_share_counts_only_requests_whose_cache_is_known() -> None:
    """A server that reports no cached counts shows no hit rate ("-"), not 0 %; one that
    reports them for some requests is judged over those (``figures.live_cached_share``)."""
    live = Live(2)
    for i in range(10):
        finished(live, 0, 1.0 + i, completion=10, prompt=100, cached=None)
    assert live.snapshot(12.0).cached_share_recent is None
    finished(live, 1, 12.0, completion=10, prompt=100, cached=50)
    assert live.snapshot(13.0).cached_share_recent == 0.5
