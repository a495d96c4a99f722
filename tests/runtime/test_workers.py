"""``--workers N``: users sharded over worker processes, through the real CLI and the
simulator's ground truth (what the server saw, by ``X-Request-ID``).

Each run's subprocess timeout comes from its work: the simulated seconds its users need
(rounds x (a reply at the simulator's decode rate + the longest think time)) over the
time scale, plus ``START_UP_S`` for the interpreters, the simulator and the workers to
start on a busy two-core machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

STRESS = [sys.executable, "-m", "stress"]
SCALE = 20
DECODE = 40.0  # simulated tokens per second per stream
START_UP_S = 60.0
"""Parent, simulator and worker interpreters starting (measured ~5 s here), with margin."""

SCENARIO = """\
name: workers_test
target:
  url: sim
  sim:
    time_scale: {scale}
    reply_tokens_min: {reply[0]}
    reply_tokens_max: {reply[1]}
    decode_tokens_per_s: {decode}
    ground_truth_path: {gt}
users: {{count: {users}, ramp_up: 4s, think_time: {{min: 1s, max: {think}s}}}}
rounds: {rounds}
conversation:
  ceiling_tokens: 8000
  turn:
    ask: ["Hi.", "And then?", "Why?"]
request: {{max_tokens: {reply[1]}, extra_body: {{ignore_eos: true}}}}
timeouts: {{drain: 10m}}
telemetry: {{gpus: "off"}}
seed: 11
"""


def _scenario(
    tmp: Path,
    users: int,
    rounds: int,
    reply: tuple[int, int] = (20, 40),
    think: float = 3.0,
) -> tuple[Path, float]:
    """The scenario file and its subprocess timeout (the work, plus start-up)."""
    gt = tmp / "gt.jsonl"
    path = tmp / "workers.yaml"
    path.write_text(
        SCENARIO.format(
            scale=SCALE, reply=reply, decode=DECODE, gt=gt, users=users, think=think, rounds=rounds
        )
    )
    work_s = rounds * (reply[1] / DECODE + think + 5.0) + 4.0  # +5: prefill, queueing
    return path, START_UP_S + 3 * work_s / SCALE


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _run(tmp: Path, scenario: Path, timeout: float, *args: str) -> Path:
    out = tmp / "out"
    proc = subprocess.run(
        [*STRESS, "run", str(scenario), "--no-tui", "--out", str(out), "--fail-on", "never", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return run_dir


def _shape(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["user"], r["round"], r["conversation"], r["turn"], r["outcome"], r["warmup"])


def _one_record_per_request_seen(run_dir: Path, gt: Path) -> list[dict[str, Any]]:
    records = _jsonl(run_dir / "requests.jsonl")
    ids = [r["request_id"] for r in records]
    assert len(ids) == len(set(ids)), "a request recorded twice"
    seen = [g["request_id"] for g in _jsonl(gt)]
    assert len(seen) == len(set(seen))
    missing = set(seen) - set(ids)
    assert not missing, f"requests the server saw without a record: {sorted(missing)[:5]}"
    state = orjson.loads((run_dir / "state.json").read_bytes())
    assert state["finished"] and state["sent"] == state["recorded"] == len(records)
    return records


@pytest.mark.timeout(900)  # two runs, each bounded by its own subprocess timeout
def test_three_workers_record_what_one_process_records(tmp_path: Path) -> None:
    users, rounds = 9, 3
    runs = {}
    for n in (1, 3):
        tmp = tmp_path / f"w{n}"
        tmp.mkdir()
        scenario, timeout = _scenario(tmp, users, rounds)
        run_dir = _run(tmp, scenario, timeout, "--workers", str(n))
        records = _one_record_per_request_seen(run_dir, tmp / "gt.jsonl")
        assert len(records) == len(_jsonl(tmp / "gt.jsonl"))  # and nothing unseen
        by_user: dict[int, list[int]] = {}
        for r in records:
            by_user.setdefault(r["user"], []).append(r["round"])
        assert {u: sorted(v) for u, v in by_user.items()} == {
            u: list(range(1, rounds + 1)) for u in range(users)
        }
        runs[n] = (run_dir, records)
    (one, rec1), (three, rec3) = runs[1], runs[3]
    assert sorted(map(_shape, rec1)) == sorted(map(_shape, rec3))
    assert [sorted(r) for r in rec1[:1]] == [sorted(r) for r in rec3[:1]]  # the same fields
    # the request ids carry the global user ids (the nonce differs per run)
    assert sorted(r["request_id"].split("-", 1)[1] for r in rec1) == sorted(
        r["request_id"].split("-", 1)[1] for r in rec3
    )
    m1 = orjson.loads((one / "manifest.json").read_bytes())
    m3 = orjson.loads((three / "manifest.json").read_bytes())
    assert m1["workers"] == 1 and "worker_pids" not in m1
    assert m3["workers"] == 3 and len(m3["worker_pids"]) == 3
    s1 = orjson.loads((one / "summary.json").read_bytes())
    s3 = orjson.loads((three / "summary.json").read_bytes())
    assert s1["verdict"]["status"] == s3["verdict"]["status"] == "PASS"
    assert sorted(s1) == sorted(s3)  # the same summary, whatever the process count
    assert s1["overall"]["requests"] == s3["overall"]["requests"] == users * rounds
    # each worker's own health is recorded, and each ran its shard u % 3
    health = _jsonl(three / "workers.jsonl")
    assert {h["worker"] for h in health} == {0, 1, 2}
    started = [e["data"] for e in _jsonl(three / "events.jsonl") if e["kind"] == "users_started"]
    assert sorted((d["worker"], d["users"]) for d in started) == [(0, 3), (1, 3), (2, 3)]
    assert not (one / "workers.jsonl").exists()


async def _start(
    tmp: Path, scenario: Path, *args: str, env: dict[str, str] | None = None
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *STRESS,
        "run",
        str(scenario),
        "--no-tui",
        "--out",
        str(tmp / "out"),
        "--fail-on",
        "never",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"},
        start_new_session=True,
    )


async def _wait_for(
    proc: asyncio.subprocess.Process, what: str, check: Any, deadline: float
) -> Any:
    """Poll ``check()`` until it returns a value; fail if the run ends first."""
    while time.monotonic() < deadline:
        if proc.returncode is not None:
            raise AssertionError(f"the run ended (exit {proc.returncode}) before {what}")
        with_value = check()
        if with_value:
            return with_value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _read(path: Path) -> Any:
    try:
        return orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None


def _run_dir(tmp: Path) -> Path | None:
    dirs = [p for p in (tmp / "out").glob("*") if p.is_dir()] if (tmp / "out").exists() else []
    return dirs[0] if dirs else None


async def kill_worker_1_mid_run(
    tmp: Path,
    scenario: Path,
    deadline: float,
    n: int,
    *flags: str,
    env: dict[str, str] | None = None,
) -> tuple[Path, list[dict[str, Any]], dict[str, Any]]:
    """Run with ``--workers n`` (and ``flags``), ``kill -9`` worker 1 once two of its users'
    requests are recorded, and check what must hold whoever ran the workers: exit 0, one
    record per request the server saw, one ``worker_died`` event naming worker 1 and its
    pid, a ``worker_died`` record for each of its requests in flight and for no other user.
    The run directory, the records and the event."""
    proc = await _start(tmp, scenario, "--workers", str(n), *flags, env=env)
    try:

        def pids() -> list[int] | None:
            d = _run_dir(tmp)
            m = _read(d / "manifest.json") if d else None
            return m.get("worker_pids") if m else None

        victim = (await _wait_for(proc, "the worker pids", pids, deadline))[1]
        run_dir = _run_dir(tmp)
        assert run_dir is not None

        def streaming() -> bool:  # worker 1's users are under way, past their first round
            path = run_dir / "requests.jsonl"
            recs = _jsonl(path) if path.exists() else []
            return sum(1 for r in recs if r["user"] % n == 1) >= 2

        await _wait_for(proc, "worker 1's users to be under way", streaming, deadline)
        os.kill(victim, signal.SIGKILL)
        stdout, stderr = await asyncio.wait_for(proc.communicate(), deadline - time.monotonic())
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    text = stdout.decode() + stderr.decode()
    assert proc.returncode == 0, text
    assert "Traceback" not in text
    records = _one_record_per_request_seen(run_dir, tmp / "gt.jsonl")
    (died,) = [e for e in _jsonl(run_dir / "events.jsonl") if e["kind"] == "worker_died"]
    assert died["data"]["worker"] == 1 and died["data"]["pid"] == victim
    lost = [r for r in records if r["error_class"] == "worker_died"]
    assert len(lost) == died["data"]["in_flight"] >= 1
    assert all(r["user"] % n == 1 and r["outcome"] == "error" for r in lost)
    return run_dir, records, died


@pytest.mark.timeout(600)  # bounded by the run's own deadline
async def test_a_worker_killed_mid_run_is_an_event_and_its_requests_have_records(
    tmp_path: Path,
) -> None:
    users, rounds = 6, 6
    # long replies: each user nearly always has a request in flight
    scenario, timeout = _scenario(tmp_path, users, rounds, reply=(160, 200), think=1.5)
    deadline = time.monotonic() + timeout
    run_dir, records, died = await kill_worker_1_mid_run(tmp_path, scenario, deadline, 3)
    assert died["data"]["returncode"] == -signal.SIGKILL
    # the other workers' users played every round
    for u in range(users):
        if u % 3 != 1:
            assert sorted(r["round"] for r in records if r["user"] == u) == list(
                range(1, rounds + 1)
            )
    summary = orjson.loads((run_dir / "summary.json").read_bytes())
    assert summary["verdict"]["status"] == "FAIL"
    assert "workers_died" in {w["code"] for w in summary["warnings"]}


@pytest.mark.timeout(600)  # bounded by the run's own deadline
async def test_ctrl_c_once_finishes_every_workers_requests_in_flight(tmp_path: Path) -> None:
    scenario, timeout = _scenario(tmp_path, 4, 50, reply=(160, 200), think=1.0)
    proc = await _start(tmp_path, scenario, "--workers", "2")
    deadline = time.monotonic() + START_UP_S + 60
    try:

        def busy() -> bool:
            d = _run_dir(tmp_path)
            state = _read(d / "state.json") if d else None
            return bool(state and state["recorded"] >= 4 and state["in_flight_count"] >= 2)

        await _wait_for(proc, "requests in flight", busy, deadline)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout)
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    text = stdout.decode() + stderr.decode()
    assert proc.returncode == 0, text  # as for one process: the run completed
    assert "Traceback" not in text
    run_dir = _run_dir(tmp_path)
    assert run_dir is not None
    records = _one_record_per_request_seen(run_dir, tmp_path / "gt.jsonl")
    assert len(records) == len(_jsonl(tmp_path / "gt.jsonl"))
    assert all(r["outcome"] == "ok" for r in records)  # nothing cancelled: they finished
    assert len(records) < 4 * 50
    manifest = orjson.loads((run_dir / "manifest.json").read_bytes())
    assert manifest["exit_reason"] == "interrupted"
    assert not [e for e in _jsonl(run_dir / "events.jsonl") if e["kind"] == "worker_died"]


@pytest.mark.parametrize("flags", [["--workers", "2"], ["--ray", "127.0.0.1:1"]])
def test_workers_are_refused_for_open_loop_scenarios(tmp_path: Path, flags: list[str]) -> None:
    path = tmp_path / "open.yaml"
    path.write_text(
        "name: open\ntarget: {url: sim}\narrivals: {rate: 10}\nduration: 1m\n"
        "conversation: {turn: {ask: [Hi.]}}\n"
    )
    proc = subprocess.run(
        [*STRESS, "run", str(path), "--no-tui", "--out", str(tmp_path), *flags],
        capture_output=True,
        text=True,
        timeout=START_UP_S,
    )
    assert proc.returncode == 2
    assert flags[0] in proc.stderr and "arrivals" in proc.stderr and "fix:" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("users", "cpus", "want"), [(600, 2, 1), (600, 16, 3), (2, 16, 1)])
def test_workers_auto_rule(users: int, cpus: int, want: int) -> None:
    from stress.config.scenario import Scenario, worker_count

    sc = Scenario.model_validate(
        {
            "name": "t",
            "rounds": 1,
            "users": {"count": users},
            "conversation": {"turn": {"ask": ["a"]}},
            "workers": "auto",
        }
    )
    assert worker_count(sc, cpus) == want


def test_the_live_view_names_the_busiest_and_the_dead_worker() -> None:
    from stress.live.headless import workers_text
    from stress.live.state import Live
    from stress.tui.widgets.header import workers_part

    live = Live(3)
    live.workers = {
        0: {"pid": 1, "cpu_pct": 12.0, "loop_lag_ms_max": 2.0, "rss_mib": 88.0},
        1: {"pid": 2, "cpu_pct": 97.0, "loop_lag_ms_max": 45.0, "rss_mib": 90.0, "host": "gpu-b"},
        2: {"pid": 3, "dead": True},
    }
    s = live.snapshot(1.0)
    assert workers_text(s.workers) == (
        "workers: w0 cpu 12% lag 2ms 88MiB, w1@gpu-b cpu 97% lag 45ms 90MiB, w2 DEAD"
    )
    from rich.text import Text

    t = Text()
    workers_part(t, s)
    assert t.plain == " · workers 3 (busiest w1@gpu-b 97% lag 45ms) w2 DEAD"  # a Ray node


def test_a_dead_worker_grades_fail_and_an_overloaded_one_distorts_the_client() -> None:
    from stress.analysis.judge import HealthCounts, grade, health_findings
    from stress.collectors.client import merge_health

    assert grade(health_findings(HealthCounts(requests=10, workers_died=1))) == "FAIL"
    assert grade(health_findings(HealthCounts(requests=10, answered=10))) == "PASS"
    calm: dict[str, Any] = {
        "samples": 5,
        "probes": 50,
        "loop_lag_ms_mean": 1.0,
        "loop_lag_ms_max": 3.0,
        "cpu_pct_mean": 20.0,
        "cpu_pct_max": 30.0,
        "rss_mib_max": 90.0,
        "overloaded_samples": 0,
        "overload_causes": {},
        "warnings": 0,
        "distorted": False,
    }
    busy = {
        **calm,
        "loop_lag_ms_max": 80.0,
        "cpu_pct_max": 99.0,
        "overloaded_samples": 4,
        "overload_causes": {"stress": 4},
        "warnings": 1,
        "distorted": True,
    }
    merged = merge_health([calm, busy])
    assert merged["distorted"] and merged["overload_cause"] == "stress"
    assert merged["loop_lag_ms_max"] == 80.0 and merged["rss_mib_max"] == 180.0
    assert merged["samples"] == 10 and merged["loop_lag_ms_mean"] == 1.0
    assert not merge_health([calm, calm])["distorted"]


@pytest.mark.timeout(600)  # bounded by the run's own deadline
async def test_ctrl_c_twice_cancels_every_workers_requests_each_with_its_record(
    tmp_path: Path,
) -> None:
    scenario, timeout = _scenario(tmp_path, 4, 50, reply=(400, 500), think=1.0)
    proc = await _start(tmp_path, scenario, "--workers", "2")
    deadline = time.monotonic() + START_UP_S + 60
    try:

        def busy() -> bool:
            d = _run_dir(tmp_path)
            state = _read(d / "state.json") if d else None
            return bool(state and state["recorded"] >= 2 and state["in_flight_count"] >= 2)

        await _wait_for(proc, "requests in flight", busy, deadline)
        proc.send_signal(signal.SIGINT)
        await asyncio.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout)
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    text = stdout.decode() + stderr.decode()
    assert proc.returncode == 0, text
    assert "Traceback" not in text
    run_dir = _run_dir(tmp_path)
    assert run_dir is not None
    records = _one_record_per_request_seen(run_dir, tmp_path / "gt.jsonl")
    cancelled = [r for r in records if r["error_class"] == "cancelled"]
    assert cancelled and all(r["outcome"] == "error" for r in cancelled)
    assert not [e for e in _jsonl(run_dir / "events.jsonl") if e["kind"] == "worker_died"]


def test_phases_run_in_step_across_workers(tmp_path: Path) -> None:
    scenario, timeout = _scenario(tmp_path, 4, 2)
    scenario.write_text(
        scenario.read_text()
        + "phases:\n  - {name: two, users: 2}\n  - {name: five, users: 5, rounds: 3}\n"
    )
    run_dir = _run(tmp_path, scenario, 2 * timeout, "--workers", "2")
    records = _one_record_per_request_seen(run_dir, tmp_path / "gt.jsonl")
    rounds: dict[tuple[str, int], list[int]] = {}
    for r in records:
        rounds.setdefault((r["phase"], r["user"]), []).append(r["round"])
    assert {k: sorted(v) for k, v in rounds.items()} == {
        **{("two", u): [1, 2] for u in range(2)},
        **{("five", u): [1, 2, 3] for u in range(5)},
    }
    # the second phase starts in every worker only after the first ended in all of them
    end_two = max(r["t_start"] + r["e2e_s"] for r in records if r["phase"] == "two")
    assert min(r["t_start"] for r in records if r["phase"] == "five") >= end_two


@pytest.mark.timeout(600)  # bounded by the run's own subprocess timeout
def test_a_run_wide_limit_counts_every_workers_records(tmp_path: Path) -> None:
    # each request uses ~100-200 tokens; 3,000 in all is crossed after a few dozen
    # requests spread over both workers, far before the scenario's 6 x 40 rounds
    users, rounds = 6, 40
    scenario, timeout = _scenario(tmp_path, users, rounds, think=1.0)
    scenario.write_text(scenario.read_text() + "limits: {max_total_tokens: 3000}\n")
    run_dir = _run(tmp_path, scenario, timeout, "--workers", "2")
    records = _one_record_per_request_seen(run_dir, tmp_path / "gt.jsonl")
    manifest = orjson.loads((run_dir / "manifest.json").read_bytes())
    assert manifest["exit_reason"] == "limit: max_total_tokens"
    assert len(records) < users * rounds
    assert {r["user"] % 2 for r in records} == {0, 1}  # both workers' requests counted
    used = [
        (r["prompt_tokens"] or r["prompt_tokens_est"]) + r["completion_tokens"] for r in records
    ]
    assert sum(used) >= 3000
    assert all(r["outcome"] == "ok" for r in records)  # in flight at the stop: finished


def test_a_workers_frames_carry_no_key_the_server_echoed() -> None:
    """The parent scrubs what it writes, but a worker's frames reach it first (over
    ``--ray``, across the network): the worker masks the key it was sent, in every form
    a server can echo, and the frame keeps its fields."""
    import html
    import json

    from stress.core.events import RunEvent
    from stress.core.record import RequestRecord
    from stress.runtime.worker import Outbox, _register_secrets
    from stress.store.wire import frame

    key = 'sk-frame-"test"\\key-8Hq2'  # built at run time, like the reliability suite's
    echoed = f"bad key {key} / {json.dumps(key)} / {html.escape(key)}"
    rec = RequestRecord(user=3, conversation=1, round=1, turn=1, warmup=False)
    rec.error = echoed
    batch = [["r", 0, rec, 1.5, None], ["e", RunEvent(1.0, "request_failed", echoed, "warning")]]
    assert json.dumps(key)[1:-1].encode() in frame(batch), "the record does not carry it"
    _register_secrets({"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    r, w = os.pipe()
    try:
        out = Outbox(w)
        for msg in batch:
            out.put(msg)
        out.flush()
        os.close(w)
        with os.fdopen(r, "rb") as f:
            data = f.read()
    finally:
        for fd in (r, w):
            with contextlib.suppress(OSError):
                os.close(fd)
    for form in (key, json.dumps(key)[1:-1], html.escape(key), "frame", "8Hq2"):
        assert form.encode() not in data, form
    assert int.from_bytes(data[:4], "big") == len(data) - 4
    (sent_rec, sent_ev) = orjson.loads(data[4:])
    masked = 'bad key *** / "***" / ***'
    assert sent_rec[2]["user"] == 3 and sent_rec[2]["error"] == masked
    assert sent_ev[1]["message"] == masked
