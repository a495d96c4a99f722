"""``--target sim`` runs the simulator in its own process (stress/sim/process.py).

Through the real CLI: the simulator is a child process, not the client's loop; a Ctrl-C
from the terminal (SIGINT to the whole foreground process group) lets the run finish its
requests in flight against a simulator that still serves them; a client killed outright
leaves no simulator behind; the child is gone after a normal run.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import orjson
import psutil
import pytest

from tests.runtime.test_run_reliability import the_run_dir, valid_lines, wait_for_state

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = f"""\
name: sim_process
target: {{url: sim, sim: {{time_scale: 1, reply_tokens_min: 40, reply_tokens_max: 40,
                           decode_tokens_per_s: 40}}}}
users: {{count: 3, ramp_up: 0s, think_time: {{min: 0s, max: 0.1s}}}}
duration: 10m
conversation:
  turn:
    paste: {{corpus: {ROOT / "corpora" / "en"}, tokens: [100, 200]}}
    ask: ["Summarise this."]
request: {{max_tokens: 40}}
warmup: {{rounds: 0}}
timeouts: {{drain: 60s}}
"""


async def start_run(tmp_path: Path) -> tuple[asyncio.subprocess.Process, Path]:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    out = tmp_path / "out"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "stress",
        "run",
        str(path),
        "--out",
        str(out),
        "--no-tui",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        start_new_session=True,  # its own process group, as a shell gives a foreground job
    )
    return proc, out


def sim_children(pid: int) -> list[psutil.Process]:
    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [k for k in kids if "sim" in k.cmdline()]


@pytest.mark.slow
async def test_ctrl_c_in_the_terminal_drains_against_a_live_simulator(tmp_path: Path) -> None:
    proc, out = await start_run(tmp_path)
    try:
        # every user has a request in flight (each streams ~1 s), a few already recorded
        await asyncio.wait_for(
            wait_for_state(out, proc, lambda s: s["recorded"] >= 3 and s["in_flight_count"] > 0),
            timeout=120,
        )
        (sim,) = sim_children(proc.pid)
        assert sim.pid != proc.pid
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
        _, stderr_b = await asyncio.wait_for(proc.communicate(), timeout=120)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, stderr_b.decode()[-2000:]
    d = the_run_dir(out)
    manifest = orjson.loads((d / "manifest.json").read_bytes())
    assert manifest["exit_reason"] == "interrupted"
    records = valid_lines(d / "requests.jsonl")
    # the requests in flight at Ctrl-C finished: the simulator was still serving them
    assert records and all(r["outcome"] == "ok" for r in records), [
        (r["outcome"], r.get("error")) for r in records if r["outcome"] != "ok"
    ]
    assert not psutil.pid_exists(sim.pid) or sim.status() == psutil.STATUS_ZOMBIE


@pytest.mark.slow
async def test_a_killed_client_leaves_no_simulator_behind(tmp_path: Path) -> None:
    proc, out = await start_run(tmp_path)
    try:
        await asyncio.wait_for(wait_for_state(out, proc, lambda s: s["sent"] >= 1), timeout=120)
        (sim,) = sim_children(proc.pid)
        proc.kill()  # kill -9: no clean-up code runs in the client
        await proc.wait()
        # the simulator sees its stdin close and stops (it is the work of a moment)
        gone, alive = psutil.wait_procs([sim], timeout=30)
        assert gone and not alive
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
