"""The real run path with the live view: the real CLI in a real pseudo-terminal, against the
built-in simulator. The view draws from its own process (``stress.tui.child``).

Quitting must never lose the run, and the view must never cost it: a view that dies or
stops reading leaves the run going on in plain lines, and the terminal is put back.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import orjson
import psutil
import pytest

from stress.live.state import RECENT_TURNS
from stress.live.view_process import EXIT_TIMEOUT_S, READY_TIMEOUT_S
from tests.terminal import Terminal

pytestmark = pytest.mark.slow

VIEW = "stress.tui.child"
START_S = READY_TIMEOUT_S + 30
"""The view's own start bound, plus the CLI's imports and the simulator's start on a busy
2-core machine."""
END_S = EXIT_TIMEOUT_S + 60
"""After the stop: the requests in flight (replies of at most 48 tokens at the simulator's
speed, x10), the view's exit, the analysis and the report."""
LEFT_ALT_SCREEN = b"\x1b[?1049l"


def scenario(tmp_path: Path) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text("""\
name: tui_e2e
target: {url: sim, sim: {time_scale: 10, reply_tokens_min: 16, reply_tokens_max: 48}}
users: {count: 4, think_time: {min: 0s, max: 0.5s}}
duration: 1h
conversation:
  cache: per_user
  ceiling_tokens: 20000
  turn:
    paste: {corpus: "bundled:en", tokens: [200, 400]}
    ask: ["Q1?", "Q2?"]
warmup: {rounds: 1}
""")
    return p


def run_dir(out: Path) -> Path | None:
    dirs = sorted(out.iterdir()) if out.exists() else []
    return dirs[-1] if dirs else None


def recorded(out: Path) -> int:
    d = run_dir(out)
    f = d / "requests.jsonl" if d else None
    return f.read_bytes().count(b"\n") if f and f.exists() else 0


def manifest(out: Path) -> dict[str, object]:
    d = run_dir(out)
    assert d is not None
    return dict(orjson.loads((d / "manifest.json").read_bytes()))


def start(tmp_path: Path) -> tuple[Terminal, Path, psutil.Process]:
    out = tmp_path / "out"
    term = Terminal(["run", str(scenario(tmp_path)), "--out", str(out)], tmp_path)
    term.wait_for(lambda: "conv tok" in term.text(), START_S, "the live view's table")
    views = term.children(VIEW)
    assert len(views) == 1, "the view draws from its own process"
    term.wait_for(lambda: recorded(out) >= 4, END_S, "four requests recorded")
    return term, out, views[0]


def test_q_in_the_view_ends_the_run_with_files_written(tmp_path: Path) -> None:
    term, out, view = start(tmp_path)
    try:
        term.send(b"q")
        assert term.wait(END_S) == 0
    finally:
        term.close()
    m = manifest(out)
    assert m["exit_reason"] == "interrupted"
    assert m["end_time"] is not None
    d = run_dir(out)
    assert d is not None and (d / "summary.json").exists()
    raw = term.raw()
    # the view had given the terminal back before the summary was printed
    assert raw.rindex(LEFT_ALT_SCREEN) < raw.index(b"run directory:")
    assert not view.is_running()
    assert "Traceback" not in term.text()
    assert "continuing with plain output" not in term.text()


def test_a_view_that_dies_leaves_the_run_going_in_plain_lines(tmp_path: Path) -> None:
    term, out, view = start(tmp_path)
    try:
        view.kill()
        term.wait_for(
            lambda: "continuing with plain output" in term.text(), 10, "the fallback's first line"
        )
        n = recorded(out)
        term.wait_for(lambda: recorded(out) >= n + 4, END_S, "four more requests recorded")
        os.kill(term.pid, signal.SIGINT)  # the run's own Ctrl-C, now that no view has keys
        assert term.wait(END_S) == 0
    finally:
        term.close()
    text = term.text()
    assert "the live view ended (its process was killed by signal 9)" in text
    raw = term.raw()
    # the run put the terminal back itself (the view could not) before its first plain line
    assert raw.rindex(LEFT_ALT_SCREEN) < raw.index(b"continuing with plain output")
    assert manifest(out)["exit_reason"] == "interrupted"
    assert "run directory:" in text and "Traceback" not in text


def test_a_view_that_stops_reading_does_not_hold_up_the_run(tmp_path: Path) -> None:
    term, out, view = start(tmp_path)
    try:
        view.suspend()  # reads nothing more: the pipe to it fills
        n = recorded(out)
        term.wait_for(lambda: recorded(out) >= n + 8, END_S, "eight more requests recorded")
        os.kill(term.pid, signal.SIGINT)
        assert term.wait(END_S) == 0
    finally:
        term.close()
    assert manifest(out)["exit_reason"] == "interrupted"
    assert not view.is_running()  # given up at the end, and the terminal put back
    raw = term.raw()
    assert raw.rindex(LEFT_ALT_SCREEN) < raw.index(b"run directory:")


def test_a_scenario_that_does_not_load_leaves_the_terminal_untouched(tmp_path: Path) -> None:
    """The view's process starts before the scenario is read; one that never got a
    header is ended at once, having drawn nothing: the error is one line on a plain
    terminal."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nusers: {count: -1}\n")
    term = Terminal(["run", str(bad), "--out", str(tmp_path / "out")], tmp_path)
    try:
        assert term.wait(START_S) == 2
    finally:
        term.close()
    assert "users.count" in term.text() and "-- fix:" in term.text()
    assert b"\x1b[?1049h" not in term.raw()  # never took the screen
    assert "Traceback" not in term.text()


def detail_rounds(screen: str, user: int) -> list[int]:
    """The rounds in the open detail panel of ``user`` (the newest first), as drawn."""
    lines = screen.splitlines()
    title = [i for i, line in enumerate(lines) if f"user {user}: recent turns" in line]
    if not title:
        return []
    rounds = []
    for line in lines[title[0] + 1 :]:
        cells = line.strip(" │┃|").split()
        if cells and cells[0] == "round":
            continue
        if len(cells) >= 3 and cells[0].isdigit() and cells[2] in ("ok", "truncated", "empty"):
            rounds.append(int(cells[0]))
        elif rounds:
            break
    return rounds


def user_rounds(out: Path, user: int) -> set[int]:
    d = run_dir(out)
    assert d is not None
    lines = (d / "requests.jsonl").read_bytes().splitlines()
    recs = [orjson.loads(line) for line in lines if line.strip()]
    return {r["round"] for r in recs if r["user"] == user}


def test_a_users_recent_turns_reach_the_view_and_follow_the_run(tmp_path: Path) -> None:
    """The detail panel shows the user's turns as recorded: they travel to the view's
    process only when a turn ends (``Ticks``), so a newer turn must still appear."""
    term, out, _ = start(tmp_path)
    try:
        term.send(b"\r")  # the first user's detail
        term.wait_for(lambda: detail_rounds(term.screen(), 0), END_S, "user 0's turns")
        first = detail_rounds(term.screen(), 0)
        assert first == sorted(first, reverse=True)
        term.wait_for(
            lambda: max(detail_rounds(term.screen(), 0) or [0]) > max(first),
            END_S,
            "a newer turn of user 0 in the open panel",
        )
        later = detail_rounds(term.screen(), 0)
        term.send(b"\x1b")  # alone: an escape followed at once by a key reads as alt+key
        term.wait_for(lambda: "recent turns" not in term.screen(), END_S, "the panel closed")
        term.send(b"q")
        assert term.wait(END_S) == 0
    finally:
        term.close()
    # the files are written in batches: once the run ended, every turn shown is in them
    assert set(first) | set(later) <= user_rounds(out, 0)
    # the newest first, none missing between (as many as the panel's height shows)
    assert later == list(range(later[0], later[0] - len(later), -1))
    assert len(later) <= RECENT_TURNS
