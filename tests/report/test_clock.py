"""One clock in the report of a time-scaled simulator run.

A run against ``target: sim`` with ``time_scale: S`` records everything on the wall clock
(requests, events, server and GPU samples) and the scale in the manifest; the report shows
simulated seconds. Every chart must share that clock: a GPU series left on wall seconds
sits in the first 1/S of a time axis the requests fill, and its energy lands in the wrong
windows of energy per token.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stress.analysis.rundata import load_run
from stress.report import charts
from stress.report.series import energy_per_token, gpu_series
from tests.report.synth import gpu_records, manifest, request, server_records, write_run

SCALE = 10.0
WALL_S = 100.0


def scaled_run(root: Path, scale: float = SCALE) -> Path:
    """100 wall seconds of two users at ``scale``, written as ``stress run`` writes them."""
    man = manifest(f"sim_x{scale:g}", duration_s=WALL_S, sim={"time_scale": scale})
    man["time_scale"] = scale
    reqs = [request(u, i + 1, 2.0 * i + u, ttft=0.1, e2e=1.0) for u in range(2) for i in range(48)]
    return write_run(
        root,
        man,
        reqs,
        server=server_records(WALL_S, 100_000.0, 0.5),
        gpu=gpu_records(WALL_S, cards=2),
    )


def test_gpu_series_is_on_the_simulated_clock_like_the_requests(tmp_path: Path) -> None:
    run = load_run(scaled_run(tmp_path))
    assert run.duration_s == WALL_S * SCALE
    cards = gpu_series(run)
    assert len(cards) == 2
    for c in cards:
        assert c.t[0] == 0.0 and c.t[-1] == pytest.approx(WALL_S * SCALE)
        assert c.power_w[-1] == 200.0  # a reading of the card, not a per-time rate: as read
    # the requests (started up to 95 wall s in) span the same axis
    assert max(float(r["t_start"]) for r in run.requests) == pytest.approx(95 * SCALE)
    assert max(float(s["t"]) for s in run.server) == pytest.approx(WALL_S * SCALE)


def test_energy_per_token_windows_match_the_tokens(tmp_path: Path) -> None:
    run = load_run(scaled_run(tmp_path))
    t, jpt = energy_per_token(run, gpu_series(run))
    # constant power (2 cards x 200 W), a request every second (80 tokens): 5 J per token
    # in every window, the last two aside (no requests in the run's last 4 wall seconds)
    assert t[-1] > 0.95 * run.duration_s and np.allclose(jpt[:-2], 2 * 200.0 / 80)


def test_charts_say_their_seconds_are_simulated(tmp_path: Path) -> None:
    run = load_run(scaled_run(tmp_path))
    assert charts.time_unit(run) == (60.0, "simulated minutes into the run")
    drawn = {c.id: c for c in charts.all_charts(run)}
    assert "simulated minutes into the run" in drawn["gpu-over-time"].svg
    assert "TTFT (simulated s)" in drawn["ttft-over-time"].svg
    assert "simulated clock" in drawn["gpu-over-time"].caption


def test_an_unscaled_run_is_unchanged(tmp_path: Path) -> None:
    run = load_run(scaled_run(tmp_path, scale=1.0))
    assert [c.t[-1] for c in gpu_series(run)] == [WALL_S, WALL_S]
    assert charts.time_unit(run) == (1.0, "seconds into the run")
    drawn = {c.id: c for c in charts.all_charts(run)}
    assert "simulated" not in drawn["gpu-over-time"].svg + drawn["gpu-over-time"].caption
