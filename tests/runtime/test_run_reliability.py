"""The run under failure, through the real CLI against real servers on loopback.

A full disk stops the run with one line and exit 1, everything written still valid;
``kill -9`` leaves ``state.json`` saying how many requests were in flight; a wrong
``target.model`` is refused up front; 10,000 users start without freezing and Ctrl-C
still stops them; a collector that dies says so.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from stress.collectors.base import Collector, RunClock
from stress.core.events import RunEvent
from stress.runtime.background import run_collector
from stress.store.recorder import Recorder
from tests.fakes import FakeServer, chunk, ok_script, serve
from tests.store.test_recorder import fill, small_disk

__all__ = ["small_disk"]  # the fixture, shared with test_recorder

SCENARIO = """\
name: reliability
target: {{url: "{url}", model: {model}}}
users: {{count: {users}, ramp_up: {ramp_up}, think_time: {{min: 0s, max: 0s}}}}
duration: {duration}
conversation:
  turn:
    ask: ["Summarise this.", "What is the key point?"]
request: {{max_tokens: 20}}
timeouts: {{drain: {drain}, connect: {connect}}}
"""


def scenario(
    tmp_path: Path,
    url: str,
    *,
    users: int = 2,
    duration: str = "10m",
    drain: str = "30s",
    model: str = "auto",
    ramp_up: str = "0s",
    connect: str = "10s",
) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(
        SCENARIO.format(
            url=url,
            users=users,
            duration=duration,
            drain=drain,
            model=model,
            ramp_up=ramp_up,
            connect=connect,
        )
    )
    return p


async def run_cli(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "stress",
        "run",
        *args,
        "--no-tui",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def valid_lines(path: Path) -> list[dict[str, Any]]:
    """Every line of a JSONL file, failing on any that is not JSON."""
    if not path.exists():
        return []
    return [orjson.loads(x) for x in path.read_bytes().splitlines()]


def the_run_dir(out: Path) -> Path:
    [d] = [p for p in out.iterdir() if p.is_dir()]
    return d


async def wait_for_state(out: Path, proc: asyncio.subprocess.Process, want: Any) -> dict[str, Any]:
    """Poll ``state.json`` until ``want(state)``; fails if the run ends first."""
    while True:
        if proc.returncode is not None:
            raise AssertionError(f"the run ended first (exit {proc.returncode})")
        dirs = [p for p in out.iterdir() if p.is_dir()] if out.exists() else []
        if dirs and (dirs[0] / "state.json").exists():
            state: dict[str, Any] = orjson.loads((dirs[0] / "state.json").read_bytes())
            if want(state):
                return state
        await asyncio.sleep(0.2)


@pytest.mark.slow
async def test_a_full_disk_stops_the_run_with_one_line_and_exit_1(
    tmp_path: Path, small_disk: Path
) -> None:
    fill(small_disk, leave=48 * 1024)  # room for the manifest and a few dozen records
    async with serve(FakeServer(script=ok_script)) as server:
        proc = await run_cli(str(scenario(tmp_path, server.url, users=4)), "--out", str(small_disk))
        # without the fix the run goes on for its 10 minutes: this bound fails it
        stdout_b, stderr_b = await asyncio.wait_for(proc.communicate(), timeout=300)
    stdout, stderr = stdout_b.decode(), stderr_b.decode()
    assert proc.returncode == 1, stderr
    assert "Traceback" not in stdout + stderr
    [line] = stderr.strip().splitlines()
    d = the_run_dir(small_disk)
    assert line.startswith(f"stress: cannot write {d}: No space left on device -- fix: ")
    assert "pass --out on another disk" in line
    recs = valid_lines(d / "requests.jsonl")  # every line valid: nothing torn
    written, unwritten = (int(w) for w in line.split("; ")[-1].split() if w.isdigit())
    assert written == len(recs)
    assert written > 0 and written + unwritten == len(server.requests)  # all accounted for
    assert "ERROR: cannot write" in stdout  # shown live, while the run stopped
    assert "(recorder_failed)" in stdout
    for f in ("events.jsonl", "server.jsonl"):
        valid_lines(d / f)


async def stall_after_four(
    request: web.Request, body: dict[str, Any], n: int
) -> web.StreamResponse:
    if n <= 4:
        return await ok_script(request, body, n)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(chunk("Hello"))
    await asyncio.sleep(3600)  # silent mid-stream until the test ends
    return resp


@pytest.mark.slow
async def test_kill_9_leaves_the_count_of_requests_in_flight(tmp_path: Path) -> None:
    out = tmp_path / "out"
    async with serve(FakeServer(script=stall_after_four)) as server:
        proc = await run_cli(str(scenario(tmp_path, server.url, users=2)), "--out", str(out))
        try:
            await asyncio.wait_for(
                wait_for_state(out, proc, lambda s: s["in_flight_count"] == 2 and s["recorded"]),
                timeout=120,
            )
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    d = the_run_dir(out)
    state = orjson.loads((d / "state.json").read_bytes())
    assert state["finished"] is False
    assert state["sent"] == 6 and state["recorded"] == 4  # the two stalled have no line
    assert state["sent"] - state["recorded"] == state["in_flight_count"] == 2
    assert sorted(r["user"] for r in state["in_flight"]) == [0, 1]
    assert all(r["t_start"] > 0 for r in state["in_flight"])
    assert state["t"] > 0
    assert len(valid_lines(d / "requests.jsonl")) == 4
    valid_lines(d / "events.jsonl")


async def test_a_model_the_server_does_not_serve_is_refused(tmp_path: Path) -> None:
    async with serve(FakeServer(models=["qwen-7b", "llama-8b"])) as server:
        path = scenario(tmp_path, server.url, model="gpt-9", duration="2s")
        proc = await run_cli(str(path), "--out", str(tmp_path / "out"))
        _, stderr_b = await asyncio.wait_for(proc.communicate(), timeout=120)
        assert not server.requests
    stderr = stderr_b.decode()
    assert proc.returncode == 1, stderr
    assert stderr.strip() == (
        f"stress: model 'gpt-9' is not served by {server.url} (it serves: qwen-7b, llama-8b) "
        "-- fix: set target.model to one of them, or auto"
    )


@pytest.mark.slow
@pytest.mark.timeout(600)  # 10,000 users, then a summary and report of thousands of records
async def test_ten_thousand_users_start_and_ctrl_c_stops_them(tmp_path: Path) -> None:
    """At the users.count cap the loop stays free: a Ctrl-C in the middle of the start-up
    burst stops the starting, drains, and every request sent gets its line."""
    out = tmp_path / "out"
    async with serve(FakeServer(script=ok_script)) as server:
        # the fake server accepts in this test's own process: on a busy machine a burst
        # of thousands of connects waits its turn, so the connect timeout is generous
        path = scenario(
            tmp_path, server.url, users=10_000, ramp_up="0s", drain="60s", connect="120s"
        )
        proc = await run_cli(str(path), "--out", str(out))
        try:
            await asyncio.wait_for(
                wait_for_state(out, proc, lambda s: s["sent"] >= 1_000), timeout=300
            )
            proc.send_signal(signal.SIGINT)
            stdout_b, stderr_b = await asyncio.wait_for(proc.communicate(), timeout=500)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    d = the_run_dir(out)
    recs = valid_lines(d / "requests.jsonl")
    failed = {r["error_class"] for r in recs if r["outcome"] == "error"}
    # what the test is about is the start and the stop; a verdict of FAIL is tolerated
    # only when the loopback server in this process missed connects of the burst
    ok = proc.returncode == 0 or (proc.returncode == 3 and failed == {"connect"})
    assert ok, (proc.returncode, failed, stdout_b.decode()[-3000:], stderr_b.decode()[-2000:])
    state = orjson.loads((d / "state.json").read_bytes())
    assert state["finished"] is True and state["in_flight_count"] == 0
    assert state["sent"] == state["recorded"] == len(valid_lines(d / "requests.jsonl"))
    manifest = orjson.loads((d / "manifest.json").read_bytes())
    assert manifest["exit_reason"] == "interrupted"
    assert "Ctrl-C: finishing requests in flight" in stdout_b.decode()


class _Broken(Collector):
    name = "server"

    async def run(self, stop: asyncio.Event) -> None:
        raise ZeroDivisionError("float division by zero")


async def test_a_collector_that_dies_says_so(tmp_path: Path) -> None:
    seen: list[RunEvent] = []
    rec = Recorder(tmp_path, on_event=seen.append)
    clock = RunClock.start()
    await run_collector(_Broken(rec, clock, 1.0), rec, clock, asyncio.Event())
    rec.close()
    [ev] = seen
    assert ev.kind == "collector_failed" and ev.severity == "error"
    assert ev.data == {"collector": "server"}
    assert "ZeroDivisionError: float division by zero" in ev.message
    [line] = valid_lines(tmp_path / "events.jsonl")
    assert line["kind"] == "collector_failed"


class _Started(Collector):
    name = "gpu"

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.started: list[bool] = []

    async def run(self, stop: asyncio.Event) -> None:
        self.started.append(stop.is_set())


async def test_the_gpu_collector_starts_after_the_first_request_or_at_the_stop(
    tmp_path: Path,
) -> None:
    """The cards are opened once the first request is written (their opening shares the
    interpreter with it); a run that stops before any request still runs the collector
    (its summary, its events), and it never waits past GPU_OPEN_WAIT_S."""
    rec = Recorder(tmp_path)
    clock = RunClock.start()
    for trigger in ("first", "stop"):
        gpu = _Started(rec, clock, 1.0)
        first, stop = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(run_collector(gpu, rec, clock, stop, after=first))
        await asyncio.sleep(0.05)
        assert gpu.started == []  # waiting
        (first if trigger == "first" else stop).set()
        await asyncio.wait_for(task, 5)
        assert gpu.started == [trigger == "stop"]
    rec.close()


async def test_a_disk_full_from_the_start_is_one_line_and_exit_1(
    tmp_path: Path, small_disk: Path
) -> None:
    fill(small_disk, leave=0)
    async with serve(FakeServer(script=ok_script)) as server:
        proc = await run_cli(str(scenario(tmp_path, server.url)), "--out", str(small_disk))
        _, stderr_b = await asyncio.wait_for(proc.communicate(), timeout=120)
        assert not server.requests
    stderr = stderr_b.decode()
    assert proc.returncode == 1, stderr
    [line] = stderr.strip().splitlines()
    assert line.startswith("stress: cannot ") and "No space left on device -- fix: " in line
