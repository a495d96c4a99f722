"""Connections a real llama.cpp server drops: idle keep-alive, and the server killed mid-run.

Issue 12 saw both against llama-server on CPU: a pooled keep-alive connection that the
server had closed became a fake ``ok`` record and killed the user for the rest of the run,
and after a ``kill -9`` and restart of the server three of four users were gone for good.
Here every request must end in one truthful record and every user must play all its rounds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.realserver.runs import (
    ROOT,
    assert_exit_follows_verdict,
    describe,
    read_jsonl,
    read_run,
    stress_run,
    write_scenario,
)
from tests.realserver.servers import ServerProcess, free_port, start_llamacpp

pytestmark = [pytest.mark.realserver, pytest.mark.timeout(2700)]


def _assert_truthful(recs: list[dict[str, object]]) -> None:
    for r in recs:
        if r["outcome"] == "ok":
            assert r["http_status"] == 200 and r["e2e_s"] is not None, describe(r)  # type: ignore[arg-type]
        if r["outcome"] == "error":
            assert r["error_class"], describe(r)  # type: ignore[arg-type]


def test_idle_keepalive_connections_closed_by_the_server(
    llamacpp: ServerProcess, tmp_path: Path
) -> None:
    """Think time past llama-server's idle keep-alive (5 s): every turn still ends ok."""
    run = stress_run(
        tmp_path, llamacpp.url, name="rs_keepalive", users=2, rounds=3, think=("6s", "7s")
    )
    recs = run.requests
    assert len(recs) == 6, [describe(r) for r in recs]
    assert all(r["outcome"] == "ok" for r in recs), [describe(r) for r in recs]
    _assert_truthful(recs)
    assert Counter(r["user"] for r in recs) == {0: 3, 1: 3}
    assert not [e for e in run.events if e["kind"] == "user_crashed"]


def test_server_killed_and_restarted_mid_run(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    """kill -9 of the server while users are mid-conversation, back 5 s later: requests in
    the gap are errors, every user goes on and finishes all its rounds."""
    port = free_port()
    server = start_llamacpp(llama_server_bin, smollm2_gguf, port, tmp_path / "a.log")
    users, rounds = 3, 8
    scenario = write_scenario(
        tmp_path, server.url, name="rs_restart", users=users, rounds=rounds,
        paste=(150, 250), first_token="60s", stall="60s", think=("2s", "3s"),
    )  # fmt: skip
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "stress", "run", str(scenario), "--out", str(out), "--no-tui"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        cwd=ROOT,
    )
    try:
        # wait until every user has finished a turn (records reach disk within ~1 s)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            files = list(out.glob("*/requests.jsonl"))
            if files and len(read_jsonl(files[0])) >= users:
                break
            time.sleep(0.3)
        assert proc.poll() is None, "the run ended before the server could be killed"
        os.killpg(server.proc.pid, signal.SIGKILL)
        server.proc.wait(timeout=30)
        server.stop()
        time.sleep(5)
        server = start_llamacpp(llama_server_bin, smollm2_gguf, port, tmp_path / "b.log")
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
        server.stop()
    assert "Traceback" not in stdout + stderr
    run = read_run(out, stdout)
    assert_exit_follows_verdict(proc.returncode, run)  # a restart: FAIL, exit 3
    recs = run.requests
    _assert_truthful(recs)
    per_user = Counter(r["user"] for r in recs)
    assert per_user == dict.fromkeys(range(users), rounds), [describe(r) for r in recs]
    errors = [r for r in recs if r["outcome"] == "error"]
    assert errors, "no request failed while the server was down"
    # refused while down, cut off by the kill, or HTTP 503 while the new server loads its model
    allowed = {"connect", "reset", "http_5xx"}
    assert {r["error_class"] for r in errors} <= allowed, [describe(r) for r in errors]
    # the users came back: each one's last round ended ok on the restarted server
    last = {r["user"]: r for r in recs if r["round"] == rounds}
    assert all(r["outcome"] == "ok" for r in last.values()), [describe(r) for r in last.values()]
    assert not [e for e in run.events if e["kind"] == "user_crashed"]
