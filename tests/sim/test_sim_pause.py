"""The simulator's ``pause`` fault (every running stream silent at once, as llama.cpp's
host-RAM prompt cache does at a slot start) found end to end: a real run through the CLI,
its pauses in summary.json and named as the cause (issue 35)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAUSE_S = 3.0
SCENARIO = f"""
name: sim_pause
target:
  url: sim
  model: auto
  sim:
    dialect: llamacpp
    max_seqs: 4
    time_scale: 4
    seed: 3
    reply_tokens_min: 200
    reply_tokens_max: 256
    faults:
      - {{kind: pause, at_seconds: [8, 16], duration_s: {PAUSE_S}}}
users:
  count: 4
  ramp_up: 0.5s
  think_time: {{min: 0.1s, max: 0.3s}}
duration: 24s
conversation:
  cache: per_user
  ceiling_tokens: 8000
  turn:
    ask: [Tell me a long story.]
request: {{max_tokens: 300}}
telemetry: {{interval: 0.5s}}
seed: 7
"""


def test_the_sims_pause_fault_is_found_and_named(tmp_path: Path) -> None:
    scenario = tmp_path / "pause.yaml"
    scenario.write_text(SCENARIO)
    args = ["run", str(scenario), "--out", str(tmp_path / "out"), "--no-tui"]
    out = subprocess.run(
        [sys.executable, "-m", "stress", *args, "--fail-on", "never"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    (run_dir,) = [p for p in (tmp_path / "out").iterdir() if (p / "manifest.json").exists()]
    summary = json.loads((run_dir / "summary.json").read_text())
    p = summary["server_pauses"]
    assert p["count"] == 2 and p["threshold_s"] == 1.0
    step = 10 * p["itl_p50_s"]  # the shared silence is the pause plus the next step
    for x in p["pauses"]:
        assert PAUSE_S <= x["seconds"] <= PAUSE_S + step and x["streams"] >= 2
    assert p["total_s"] == pytest.approx(sum(x["seconds"] for x in p["pauses"]))
    causes = summary["capacity"]["causes"]
    assert causes[0]["code"] == "server_pause"
    assert "--cache-ram 0" in causes[0]["text"]
