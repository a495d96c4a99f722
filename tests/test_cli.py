"""The real CLI in a subprocess against real HTTP servers on loopback.

Covers the quick start, Ctrl-C once and twice, kill -9 then ``stress report``, and that an
API key given through the environment appears in no file and no output.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from stress.record import RequestRecord
from tests.fakes import DONE, FakeServer, chunk, serve, stream, usage_chunk

ROOT = Path(__file__).resolve().parents[1]
REQUIRED_KEYS = set(RequestRecord.__dataclass_fields__)

SCENARIO = """\
name: cli_test
target: {{url: "{url}"{extra}}}
users: {{count: {users}, ramp_up: 0.5s, think_time: {{min: 0.1s, max: 0.3s}}}}
duration: {duration}
conversation:
  ceiling_tokens: 3000
  turn:
    paste: {{corpus: {corpus}, tokens: [200, 400]}}
    ask: ["Summarise this.", "What is the key point?"]
request: {{max_tokens: {max_tokens}}}
timeouts: {{drain: {drain}}}
"""


def scenario(
    tmp_path: Path,
    *,
    url: str = "sim",
    users: int = 2,
    duration: str = "4s",
    max_tokens: int = 20,
    drain: str = "10s",
    extra: str = "",
) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(
        SCENARIO.format(
            url=url,
            users=users,
            duration=duration,
            max_tokens=max_tokens,
            drain=drain,
            extra=extra,
            corpus=ROOT / "corpora" / "en",
        )
    )
    return p


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "stress", *args]


def env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", **extra}


def run_dir(out: Path) -> Path:
    [d] = [p for p in out.iterdir() if p.is_dir()]
    return d


def wait_for_requests(out: Path, n: int, timeout: float = 30) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        dirs = [p for p in out.iterdir()] if out.exists() else []
        if dirs and (dirs[0] / "requests.jsonl").exists():
            lines = (dirs[0] / "requests.jsonl").read_bytes().count(b"\n")
            if lines >= n:
                return dirs[0]
        time.sleep(0.1)
    raise AssertionError(f"no {n} requests recorded within {timeout}s")


def records(d: Path) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in (d / "requests.jsonl").read_bytes().splitlines() if x]


@pytest.mark.slow
def test_quickstart_scenario_runs_against_the_simulator(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        cli(
            "run",
            str(ROOT / "scenarios" / "quickstart.yaml"),
            "--duration",
            "6s",
            "--out",
            str(out),
            "--progress-interval",
            "2s",
        ),
        capture_output=True,
        text=True,
        timeout=90,
        env=env(),
    )
    assert proc.returncode == 0, proc.stderr
    d = run_dir(out)
    assert d.name.endswith("-quickstart")
    manifest = orjson.loads((d / "manifest.json").read_bytes())
    assert manifest["exit_reason"] == "duration" and manifest["end_time"] is not None
    assert manifest["scenario"]["conversation"]["cache"] == "per_user"
    assert manifest["model"] == "sim-llm" and manifest["tokenizer"].startswith("tiktoken")
    recs = records(d)
    assert recs and all(set(r) >= REQUIRED_KEYS for r in recs)
    assert {r["outcome"] for r in recs} == {"ok"}
    assert all(r["chunks_content"] > 0 and r["ttft_s"] > 0 for r in recs)
    summary = orjson.loads((d / "summary.json").read_bytes())
    assert summary["overall"]["requests"] == sum(1 for r in recs if not r["warmup"])
    assert "TTFT s" in proc.stdout and "run directory" in proc.stdout
    assert (d / "report.html").exists() and "report:" in proc.stdout


@pytest.mark.slow
def test_ctrl_c_once_finishes_in_flight_and_writes_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.Popen(
        cli("run", str(scenario(tmp_path, duration="60s", max_tokens=40)), "--out", str(out)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )
    d = wait_for_requests(out, 2)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    manifest = orjson.loads((d / "manifest.json").read_bytes())
    assert manifest["exit_reason"] == "interrupted"
    recs = records(d)
    assert not [r for r in recs if r["error_class"] == "cancelled"]
    assert (d / "summary.json").exists() and "Ctrl-C" in stdout


@pytest.mark.slow
def test_ctrl_c_twice_cancels_and_records_in_flight(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.Popen(
        cli(
            "run",
            str(scenario(tmp_path, users=3, duration="60s", max_tokens=4000)),
            "--out",
            str(out),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )
    deadline = time.monotonic() + 30
    d = None
    while time.monotonic() < deadline:  # wait until streams are under way
        if out.exists() and any(out.iterdir()):
            d = run_dir(out)
            if (d / "events.jsonl").exists():
                break
        time.sleep(0.1)
    time.sleep(2.0)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert d is not None
    recs = records(d)
    cancelled = [r for r in recs if r["error_class"] == "cancelled"]
    assert cancelled and all(r["outcome"] == "error" for r in cancelled)
    assert {r["user"] for r in recs} == {0, 1, 2}  # every request sent ended in a record
    assert orjson.loads((d / "manifest.json").read_bytes())["exit_reason"] == "interrupted"


@pytest.mark.slow
def test_kill_9_then_report_rebuilds_the_summary(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.Popen(
        cli("run", str(scenario(tmp_path, duration="60s")), "--out", str(out)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env(),
    )
    d = wait_for_requests(out, 3)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    n_lines = len(records(d))  # every line parses: the file is valid up to the last flush
    assert n_lines >= 3
    assert not (d / "summary.json").exists()
    rep = subprocess.run(
        cli("report", str(d)), capture_output=True, text=True, timeout=30, env=env()
    )
    assert rep.returncode == 0, rep.stderr
    summary = orjson.loads((d / "summary.json").read_bytes())
    assert summary["requests_total"] == n_lines and summary["complete"] is False
    assert "did not finish" in rep.stdout and "TTFT (s)" in rep.stdout
    assert (d / "report.html").exists() and (d / "report.md").exists()


def test_report_on_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    rep = subprocess.run(
        cli("report", str(tmp_path)), capture_output=True, text=True, timeout=30, env=env()
    )
    assert rep.returncode == 1 and "not a run directory" in rep.stderr
    assert "Traceback" not in rep.stderr


def test_validate_reports_problems_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: x\nusers: {count: -2, colour: red}\nduration: 1m\n"
        "conversation: {turn: {ask: [hi]}}\n"
    )
    proc = subprocess.run(cli("validate", str(bad)), capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith(f"{bad}:2: users.") for line in lines)
    good = subprocess.run(
        cli("validate", *map(str, sorted((ROOT / "scenarios").glob("*.yaml")))),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert good.returncode == 0, good.stderr


def test_unreachable_target_is_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        cli(
            "run",
            str(scenario(tmp_path)),
            "--target",
            "http://127.0.0.1:9",
            "--out",
            str(tmp_path / "out"),
        ),
        capture_output=True,
        text=True,
        timeout=60,
        env=env(),
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("stress: cannot reach http://127.0.0.1:9")


SECRET = "sk-test-DO-NOT-LEAK-4f9c2a7e1b"


@pytest.mark.slow
async def test_api_key_from_environment_never_reaches_files_or_output(tmp_path: Path) -> None:
    async def echoing(request: web.Request, body: dict[str, Any], n: int) -> web.StreamResponse:
        auth = request.headers.get("Authorization", "")
        assert auth == f"Bearer {SECRET}"
        if n % 2:  # a careless server that echoes the key in an error message
            return web.json_response({"error": {"message": f"bad key {auth}"}}, status=500)
        parts = [chunk(f"you sent {auth}"), chunk(".", finish="stop"), usage_chunk(10, 2), DONE]
        return await stream(request, parts)

    async with serve(FakeServer(script=echoing)) as server:
        path = scenario(tmp_path, url=server.url, duration="3s", extra=", api_key_env: MY_KEY")
        proc = await asyncio.create_subprocess_exec(
            *cli("run", str(path), "--out", str(tmp_path / "out")),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env(MY_KEY=SECRET),
        )
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, stderr
    assert server.requests, "the server saw no request"
    d = run_dir(tmp_path / "out")
    recs = records(d)
    assert any(r["error_class"] == "http_5xx" and "***" in r["error"] for r in recs)
    files = [f for f in d.rglob("*") if f.is_file()]
    assert any(f.name == "report.html" for f in files)
    for f in files:
        assert SECRET.encode() not in f.read_bytes(), f"key leaked into {f.name}"
    assert SECRET.encode() not in stdout + stderr


def test_missing_key_variable_is_one_line(tmp_path: Path) -> None:
    path = scenario(tmp_path, extra=", api_key_env: NOT_SET_ANYWHERE_X, api_key_required: true")
    proc = subprocess.run(
        cli("run", str(path), "--out", str(tmp_path / "out")),
        capture_output=True,
        text=True,
        timeout=60,
        env=env(),
    )
    assert proc.returncode == 1 and "NOT_SET_ANYWHERE_X" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_internal_error_is_one_line_unless_debugging(tmp_path: Path) -> None:
    """A bug of ours must still not print a traceback at a user (STRESS_DEBUG shows it)."""
    code = (
        "import sys, stress.cli as c\n"
        "def boom(args): raise RuntimeError('boom')\n"
        "c.cmd_validate = boom\n"
        "sys.exit(c.main(['validate', 'x']))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, env=env()
    )
    assert proc.returncode == 70 and "Traceback" not in proc.stderr
    assert "internal error: RuntimeError: boom" in proc.stderr
    debug = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=30,
        env=env(STRESS_DEBUG="1"),
    )
    assert "Traceback" in debug.stderr
