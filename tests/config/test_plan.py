"""The run plan decides the run's counts once, and the run is sized by them.

The end-to-end test runs the real CLI on the simulator twice with the same eight users,
once as the scenario's base and once as a phase over a one-user base: a pool sized from the
base (five connections) starved three of the phase's users and counted their wait for a
connection as time to first token, so the two runs must now look alike.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from stress.config.bundled import find_scenario
from stress.config.plan import CONNECTION_HEADROOM, plan_run
from stress.config.scenario import load_scenario

BASE = """\
name: {name}
target:
  url: sim
  sim: {{time_scale: 20, reply_tokens_min: 150, reply_tokens_max: 200}}
users: {{count: {users}, think_time: {{min: 0.5s, max: 1s}}}}
duration: 2m
conversation:
  ceiling_tokens: 4000
  turn: {{ask: ["Hi."]}}
request: {{max_tokens: 200}}
warmup: {{rounds: 0}}
telemetry: {{gpus: "off"}}
seed: 3
"""
PHASE = "phases: [{name: users-8, users: 8}]\n"
STRESS = [sys.executable, "-m", "stress"]
WALL_S = 2 * 60 / 20
"""The run's wall time at the simulator's time scale."""


def _scenario(tmp_path: Path, name: str, users: int, extra: str = "") -> Path:
    p = tmp_path / f"{name}.yaml"
    p.write_text(BASE.format(name=name, users=users) + extra)
    return p


def test_the_busiest_phase_sizes_the_plan(tmp_path: Path) -> None:
    sweep = load_scenario(
        find_scenario("concurrency_sweep")
    ).scenario  # base 1 user, phases up to 8
    plan = plan_run(sweep)
    assert sweep.users.count == 1
    assert plan.users == plan.peak == 8
    assert plan.connections() == 8 + CONNECTION_HEADROOM
    assert [label for label, _ in plan.steps][-1] == "users-8#2"
    assert plan.manifest()["peak"] == 8


def test_workers_share_the_users_and_each_pool_covers_its_own(tmp_path: Path) -> None:
    sc = load_scenario(_scenario(tmp_path, "w", 10)).scenario
    plan = plan_run(sc.model_copy(update={"workers": 3}))
    assert plan.workers == 3
    assert [plan.worker_users(k) for k in range(3)] == [4, 3, 3]
    assert plan.connections(plan.worker_users(0)) == 4 + CONNECTION_HEADROOM


def test_open_loop_plans_no_user_rows_and_one_process(tmp_path: Path) -> None:
    sc = load_scenario(find_scenario("open_loop_chat")).scenario
    plan = plan_run(sc)
    assert plan.users == 0 and plan.workers == 1
    assert plan.peak == sc.peak_users


def _run(tmp_path: Path, scenario: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    out = tmp_path / scenario.stem
    proc = subprocess.run(
        [*STRESS, "run", str(scenario), "--no-tui", "--out", str(out), "--fail-on", "never"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        timeout=60 + 6 * WALL_S,  # start-up and the report, then the run on a busy machine
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    records = [orjson.loads(x) for x in (run_dir / "requests.jsonl").read_bytes().splitlines()]
    return orjson.loads((run_dir / "summary.json").read_bytes()), records


@pytest.mark.slow
def test_a_phase_runs_like_the_same_users_without_phases(tmp_path: Path) -> None:
    flat, flat_recs = _run(tmp_path, _scenario(tmp_path, "flat", 8))
    phased, phased_recs = _run(tmp_path, _scenario(tmp_path, "phased", 1, PHASE))
    ttft = [s["overall"]["ttft_s"]["p95"] for s in (flat, phased)]
    assert ttft[1] <= 1.5 * ttft[0] + 0.05, ttft  # within run-to-run noise
    per_user = collections.Counter(r["user"] for r in phased_recs)
    assert len(per_user) == 8
    assert min(per_user.values()) >= max(per_user.values()) // 2, per_user  # nobody starves
    assert len(phased_recs) >= 0.8 * len(flat_recs)
    manifest = orjson.loads(next((tmp_path / "phased").glob("*/manifest.json")).read_bytes())
    assert manifest["plan"]["peak"] == 8
    assert manifest["plan"]["connections"] >= 8
