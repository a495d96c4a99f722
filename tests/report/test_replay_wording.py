"""Replay and time-scaled runs worded for what they are (issue 35).

One real ``stress run mooncake_replay`` (the bundled scenario: an 80-request trace at speed
1 on the simulator at time scale 4, ~20 s): the capacity answer speaks of trace requests
and their rate, not users nor conversations' cold first turns; ``replay_ended`` says speed
1 and the time scale apart; the terminal summary carries the report's ITL footnote.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from stress.report.itl import ONE_READ_NOTE
from stress.report.summary import render_summary

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("replay")
    proc = subprocess.run(
        [sys.executable, "-m", "stress", "run", "mooncake_replay", "--out", str(out),
         "--no-tui", "--fail-on", "never"],
        cwd=REPO, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]
    (run_dir,) = [p for p in out.iterdir() if (p / "manifest.json").exists()]
    return run_dir, proc.stdout


def test_capacity_speaks_of_trace_requests_not_users(replay: tuple[Path, str]) -> None:
    run_dir, stdout = replay
    (line,) = [x for x in stdout.splitlines() if x.startswith("capacity:")]
    assert line.startswith("capacity: replay of 80 trace requests at ")
    assert "requests/s" in line and "in flight at once" in line
    assert " users" not in line and "conversations" not in line
    report = (run_dir / "report.md").read_text()
    capacity = report[report.index("## Capacity") :].split("\n## ")[0]
    assert "First turns" not in capacity and "cold" not in capacity
    assert "users' conversations" not in capacity
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["capacity"]["load"] == "replay"
    assert summary["capacity"]["replay"]["requests"] == 80
    assert summary["capacity"]["first_turns"] is None
    # the trace spans ~65 simulated seconds: about 80 / 65 requests per second
    assert 1.0 < summary["capacity"]["replay"]["req_s"] < 1.5


def test_replay_ended_names_the_speed_and_the_time_scale_apart(replay: tuple[Path, str]) -> None:
    events = [json.loads(x) for x in (replay[0] / "events.jsonl").read_text().splitlines()]
    (ended,) = [e for e in events if e["kind"] == "replay_ended"]
    assert ended["data"]["speed"] == 1.0 and ended["data"]["time_scale"] == 4.0
    assert "at speed 1," in ended["message"] and "simulated time x4" in ended["message"]
    assert "at speed 4" not in ended["message"]


def test_time_scaled_terminal_summary_carries_the_itl_footnote(replay: tuple[Path, str]) -> None:
    run_dir, stdout = replay
    assert "ITL s" in stdout
    (note,) = [x for x in stdout.splitlines() if x.startswith("ITL: ")]
    assert ONE_READ_NOTE in note and "x4" in note
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["time_scale"] = 1.0  # the same figures on a wall-clock run: no note
    assert not any(x.startswith("ITL: ") for x in render_summary(summary).splitlines())
