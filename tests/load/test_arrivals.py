"""Open-loop sessions (``arrivals:``), through the real CLI against the built-in simulator.

A long simulated run (time_scale 120: an hour in 30 s of wall time) is checked from its run
directory alone: the arrival rate within three sigma of the Poisson count, gamma's gaps with
the burstiness asked for, every session its K rounds, never more sessions at once than the
cap, warm-up by time, and offered vs achieved load in summary.json and the report.
"""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from stress.config.scenario import Arrivals, load_scenario, time_scaled, with_overrides
from stress.core.errors import ScenarioError
from stress.load.engine import arrival_gap, session_rounds

STRESS = [sys.executable, "-m", "stress"]
SCALE = 120
DURATION_MIN = 60
RATE = 25.0  # sessions per simulated minute: 1,500 expected arrivals

SCENARIO = """\
name: open_loop
target:
  url: sim
  sim: {{time_scale: {scale}, reply_tokens_min: 4, reply_tokens_max: 8}}
arrivals:
{arrivals}
duration: {duration}m
conversation:
  ceiling_tokens: 4000
  turn:
    ask: ["Hi.", "And then?"]
request: {{max_tokens: 8}}
timeouts: {{drain: 10m}}
telemetry: {{gpus: "off"}}
seed: 7
"""


def _write(tmp_path: Path, arrivals: str, duration: int = DURATION_MIN) -> Path:
    p = tmp_path / "open_loop.yaml"
    p.write_text(SCENARIO.format(scale=SCALE, arrivals=arrivals, duration=duration))
    return p


def _run(tmp_path: Path, scenario: Path) -> Path:
    wall = DURATION_MIN * 60 / SCALE
    proc = subprocess.run(
        [*STRESS, "run", str(scenario), "--no-tui", "--out", str(tmp_path), "--fail-on", "never"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        timeout=60 + 6 * wall,  # start-up, then the run with room for a slow shared machine
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    return run_dir


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _sessions(run_dir: Path) -> list[dict[str, Any]]:
    return [e["data"] for e in _jsonl(run_dir / "events.jsonl") if e["kind"] == "session_ended"]


@pytest.mark.slow
def test_poisson_sessions_rate_rounds_cap_and_offered_vs_achieved(tmp_path: Path) -> None:
    cap = 6
    run_dir = _run(
        tmp_path,
        _write(
            tmp_path,
            f"  rate: {RATE}\n  rounds: [1, 4]\n"
            "  think_time: {distribution: constant, mean: 20s}\n"
            f"  max_concurrent: {cap}\n  warmup: 5m",
        ),
    )
    sessions = _sessions(run_dir)
    (ended,) = [e for e in _jsonl(run_dir / "events.jsonl") if e["kind"] == "arrivals_ended"]
    n = ended["data"]["arrivals"]
    assert len(sessions) == n  # every arrival has its record, admitted or not
    assert sorted(d["session"] for d in sessions) == list(range(n))
    # the rate: a Poisson count over the window, within 3 sigma
    window_min = ended["data"]["window_s"] * SCALE / 60
    assert window_min == pytest.approx(DURATION_MIN, rel=0.02)
    expected = RATE * window_min
    assert abs(n - expected) <= 3 * math.sqrt(expected), (n, expected)
    # exponential gaps: CV near 1
    arrived = np.sort([d["arrived"] for d in sessions])
    gaps = np.diff(arrived)
    assert gaps.std(ddof=1) / gaps.mean() == pytest.approx(1.0, abs=0.12)

    # each session: its K rounds (1..4, drawn from its seed), one record per round sent
    records = _jsonl(run_dir / "requests.jsonl")
    by_session: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        by_session.setdefault(r["user"], []).append(r)
    spec = Arrivals(rate=RATE, rounds=(1, 4))
    done = [d for d in sessions if d["reason"] == "done"]
    assert len(done) > 50
    for d in sessions:
        assert d["rounds"] == session_rounds(7, d["session"], spec)
        rounds = sorted(r["round"] for r in by_session.get(d["session"], []))
        assert rounds == list(range(1, d["rounds_done"] + 1))
        if d["reason"] == "done":
            assert d["rounds_done"] == d["rounds"]
    assert {d["rounds"] for d in done} == {1, 2, 3, 4}

    # the cap: never more than `cap` sessions with a request in their span at once
    spans = []
    for rows in by_session.values():
        start = min(r["t_start"] for r in rows)
        end = max(r["t_start"] + (r.get("e2e_s") or 0.0) for r in rows)
        spans += [(start, 1), (end, -1)]
    active = most = 0
    for _, step in sorted(spans):
        active += step
        most = max(most, active)
    assert most == cap  # offered ~8 sessions at once (25/min x 20 s): the cap binds
    # so a backlog formed, first in first out, its waits recorded
    admitted = sorted(
        (d for d in sessions if d["admitted"] is not None), key=lambda d: d["admitted"]
    )
    assert [d["session"] for d in admitted] == sorted(d["session"] for d in admitted)
    assert max(d["wait_s"] for d in admitted) > 0
    assert any(d["reason"] == "backlog" for d in sessions)

    # warm-up: requests due in the first 5 simulated minutes of the phase, and only those
    # (the phase starts a few ms after the run clock's zero; a late timer changes nothing)
    started = ended["data"]["started"]
    for r in records:
        assert r["warmup"] == ((r["t_sched"] - started) * SCALE < 300), r

    summary = orjson.loads((run_dir / "summary.json").read_bytes())
    load = summary["arrivals"]
    assert load["arrivals"] == n
    assert load["offered_per_min"] == pytest.approx(n / window_min, rel=1e-6)
    assert load["admitted"] == len(admitted)
    assert load["admitted_per_min"] < load["offered_per_min"]  # the cap held the load back
    assert load["completed"] == len(done)
    assert load["max_active"] == cap
    assert load["never_admitted"] == sum(1 for d in sessions if d["reason"] == "backlog")
    assert load["max_backlog"] > 0
    duration = summary["duration_s"]
    assert load["achieved_req_s"] == pytest.approx(len(records) / duration, rel=1e-6)
    report = (run_dir / "report.md").read_text()
    assert "Offered vs achieved load" in report
    assert load["sentence"] in report
    # the capacity answer counts sessions at once, not every session that came
    capacity = summary["capacity"]
    assert capacity["open_loop"] is True and capacity["users"] == cap
    assert capacity["sentence"].startswith(f"open-loop arrivals, up to {cap} sessions at once")
    assert "never admitted" in report


@pytest.mark.slow
def test_gamma_arrivals_have_the_burstiness_asked_for(tmp_path: Path) -> None:
    run_dir = _run(
        tmp_path,
        _write(tmp_path, f"  rate: {RATE}\n  process: gamma\n  burstiness: 2\n  rounds: 1"),
    )
    sessions = _sessions(run_dir)
    n = len(sessions)
    arrived = np.sort([d["arrived"] for d in sessions])
    gaps = np.diff(arrived)
    # the gap CV of ~1,500 gamma gaps with CV 2 has a spread of ~0.09: 4 sigma
    assert gaps.std(ddof=1) / gaps.mean() == pytest.approx(2.0, abs=0.35)
    # the mean rate is the asked one: a renewal count's sd is sqrt(n) x CV
    expected = RATE * DURATION_MIN
    assert abs(n - expected) <= 3 * 2 * math.sqrt(expected)
    assert all(d["reason"] == "done" and d["rounds_done"] == 1 for d in sessions)
    summary = orjson.loads((run_dir / "summary.json").read_bytes())
    assert summary["arrivals"]["gap_cv"] == pytest.approx(2.0, abs=0.35)
    assert summary["arrivals"]["never_admitted"] == 0


def test_arrival_gaps_mean_and_cv() -> None:
    rng = random.Random(1)
    for process, cv in (("poisson", 1.0), ("gamma", 0.5), ("gamma", 2.0)):
        spec = Arrivals(rate=30, process=process, burstiness=cv)  # type: ignore[arg-type]
        gaps = np.array([arrival_gap(rng, spec) for _ in range(100_000)])
        assert gaps.mean() == pytest.approx(2.0, rel=0.03)
        assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)


def test_arrivals_and_users_exclude_each_other(tmp_path: Path) -> None:
    p = _write(tmp_path, "  rate: 5")
    p.write_text(p.read_text().replace("arrivals:", "users: {count: 4}\narrivals:"))
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert "exclude each other" in str(e.value) and "users" in str(e.value)


def test_arrivals_validation(tmp_path: Path) -> None:
    bad = {
        "  rate: 5\n  burstiness: 2": "gamma arrivals only",
        "  rate: 0": "rate",
        "  rate: 5\n  rounds: [3, 2]": "rounds",
    }
    for arrivals, words in bad.items():
        with pytest.raises(ScenarioError) as e:
            load_scenario(_write(tmp_path, arrivals))
        assert words in str(e.value), arrivals
    p = _write(tmp_path, "  rate: 5")
    p.write_text(p.read_text().replace("duration: 60m\n", "rounds: 3\n"))
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert "duration" in str(e.value)


def test_overrides_and_time_scale_keep_arrivals(tmp_path: Path) -> None:
    loaded = load_scenario(
        _write(tmp_path, "  rate: 6\n  warmup: 2m\n  think_time: {min: 10s, max: 20s}")
    )
    again = with_overrides(loaded, duration=600)
    assert again.scenario.arrivals == loaded.scenario.arrivals
    with pytest.raises(ScenarioError) as e:
        with_overrides(loaded, users=3)
    assert "--users" in str(e.value)
    scaled = time_scaled(loaded.scenario, 60).arrivals
    assert scaled is not None
    assert (
        scaled.rate == 360 and scaled.warmup == 2 and scaled.think_time.max == pytest.approx(1 / 3)
    )


def test_shipped_open_loop_scenario_validates() -> None:
    from stress.config.bundled import SCENARIOS

    loaded = load_scenario(SCENARIOS / "open_loop_chat.yaml")
    assert loaded.scenario.arrivals is not None


def test_live_keeps_active_sessions_only_and_counts_arrivals() -> None:
    from stress.core.record import RequestRecord
    from stress.live.headless import HeadlessPrinter
    from stress.live.state import Live
    from stress.tui.widgets.header import sessions_text

    live = Live(0, time_scale=60)
    live.open_loop = True
    for u in range(1000):
        live.on_arrival(u * 0.01)
        live.start_session(u)
        rec = RequestRecord(user=u, conversation=1, round=1, turn=1)
        live.on_send(rec)
        live.on_record(rec, u * 0.01)
        if u < 995:
            live.end_session(u)
    live.backlog = 3
    s = live.snapshot(10.0)
    assert [r.user for r in s.users] == [995, 996, 997, 998, 999]  # bounded: live ones only
    assert (s.arrivals, s.sessions_active, s.sessions_done, s.backlog) == (1000, 5, 995, 3)
    assert s.arrivals_per_min_recent == pytest.approx(1000 / 10 * 60 / 60)  # per sim minute
    text = sessions_text(s)
    assert "5 active" in text and "3 waiting" in text and "1000 arrived" in text
    printer = HeadlessPrinter(lambda: s, 60.0, 5.0)
    assert "sessions 5 active, 3 waiting, 1000 arrived" in printer.status(s)


@pytest.mark.slow
def test_a_schedule_of_rates_changes_the_arrival_rate_when_asked(tmp_path: Path) -> None:
    """10 sessions a minute for the first half hour, then 40: each half's count within
    three sigma of its Poisson mean, and the offered rate is the schedule's average."""
    run_dir = _run(
        tmp_path,
        _write(tmp_path, "  rate: 10\n  rounds: 1\n  schedule: [{at: 30m, rate: 40}]"),
    )
    arrived = np.array([d["arrived"] * SCALE for d in _sessions(run_dir)])  # simulated s
    first, second = int((arrived < 1800).sum()), int((arrived >= 1800).sum())
    for n, expected in ((first, 10 * 30), (second, 40 * 30)):
        assert abs(n - expected) <= 3 * math.sqrt(expected), (first, second)
    summary = orjson.loads((run_dir / "summary.json").read_bytes())
    assert summary["arrivals"]["rate_per_min"] == pytest.approx(25.0, rel=0.02)


def test_schedule_steps_must_be_in_order() -> None:
    with pytest.raises(ValueError, match="in order of `at`"):
        Arrivals(rate=5, schedule=[{"at": 600, "rate": 9}, {"at": 60, "rate": 3}])  # type: ignore[list-item]
    spec = Arrivals(rate=5, schedule=[{"at": 60, "rate": 9}])  # type: ignore[list-item]
    assert spec.rate_at(0) == (5, 60) and spec.rate_at(60) == (9, None)
    assert spec.mean_rate(120) == pytest.approx(7.0)
