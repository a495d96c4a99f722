"""Simulated GPUs: power follows the simulated load, labelled simulated, never real cards.

The model (``stress.sim.gpus``) is checked against a fake engine clock; the wire
(``GET /sim/gpus``) and the collector backend against a real simulator in this process; the
whole path (``stress run`` on the simulator with GPUs: records, collectors.json, report)
through the real CLI.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from stress.collectors.gpu.backend import BackendUnavailable
from stress.collectors.gpu.simulated import SimGpuBackend
from stress.config.sim import load_config_file
from stress.sim import SimConfig, start_sim
from stress.sim.gpus import FULL_W, IDLE_W, POWER_LIMIT_W, SimGpus, power_w
from stress.sim.scheduler import EngineStats
from tests.sim.helpers import stream_chat


class FakeEngine:
    """Just what ``SimGpus`` reads: the simulated clock and the step-time counters."""

    def __init__(self) -> None:
        self.now = 0.0
        self.stats = EngineStats()

    def sim_now(self) -> float:
        return self.now

    def run(self, seconds: float, busy: float) -> None:
        self.now += seconds
        self.stats.decode_seconds += seconds * busy


def test_power_follows_utilisation_and_energy_integrates_it() -> None:
    eng = FakeEngine()
    gpus = SimGpus(2)
    energy_by_hand = [0.0, 0.0]
    for busy in (0.0, 0.25, 1.0, 0.5, 0.0):
        eng.run(10.0, busy)
        r = gpus.reading(eng)  # type: ignore[arg-type]
        for i, c in enumerate(r["cards"]):
            assert c["util_gpu"] == pytest.approx(100 * busy)
            assert c["power_w"] == pytest.approx(power_w(busy, i), abs=1e-3)
            energy_by_hand[i] += c["power_w"] * 10.0
            assert c["energy_j"] == pytest.approx(energy_by_hand[i], abs=0.01)
            assert c["simulated"] is True and "simulated" in c["name"].lower()
            assert c["bus_id"] == f"sim:{i}"
            assert c["power_limit_w"] == POWER_LIMIT_W
            assert ("gpu_idle" if busy == 0 else None) is None or c["throttle_mask"] & 0x1
    assert power_w(0.0) == IDLE_W and power_w(1.0) == FULL_W < POWER_LIMIT_W
    assert power_w(1.0, 1) < power_w(1.0, 0)  # the second card draws a little less


def test_temperature_lags_power() -> None:
    eng = FakeEngine()
    gpus = SimGpus(1)
    temps = []
    for _ in range(20):
        eng.run(5.0, 1.0)
        temps.append(gpus.reading(eng)["cards"][0]["temp_c"])  # type: ignore[arg-type]
    assert all(b > a for a, b in itertools.pairwise(temps))  # still rising
    steady = 30.0 + 0.075 * FULL_W
    assert temps[0] < steady - 10  # the power jumped at once, the temperature did not
    assert temps[-1] == pytest.approx(steady, abs=2.0)


def test_busy_time_counted_ahead_is_carried_not_lost() -> None:
    """A step is counted when it starts: busy time past ``now`` goes to the next reading,
    so no interval reads over 100 % and the total is kept."""
    eng = FakeEngine()
    gpus = SimGpus(1)
    eng.now = 1.0
    eng.stats.decode_seconds = 1.5  # a long step started before this reading
    first = gpus.reading(eng)["cards"][0]  # type: ignore[arg-type]
    eng.now = 2.0
    second = gpus.reading(eng)["cards"][0]  # type: ignore[arg-type]
    assert first["util_gpu"] == 100.0 and second["util_gpu"] == pytest.approx(50.0)


def test_a_restart_resets_the_engine_counters_not_the_energy() -> None:
    eng = FakeEngine()
    gpus = SimGpus(1)
    eng.run(10.0, 1.0)
    before = gpus.reading(eng)["cards"][0]["energy_j"]  # type: ignore[arg-type]
    eng.stats = EngineStats()  # what Engine.reset does
    eng.run(10.0, 0.5)
    after = gpus.reading(eng)["cards"][0]  # type: ignore[arg-type]
    assert after["util_gpu"] == pytest.approx(50.0)
    assert after["energy_j"] == pytest.approx(before + power_w(0.5) * 10.0, abs=0.01)


def test_gpus_is_a_config_field_and_a_flag(tmp_path: Path) -> None:
    assert SimConfig().gpus == 0
    p = tmp_path / "sim.yaml"
    p.write_text("gpus: 2\n")
    assert load_config_file(str(p)).gpus == 2
    assert load_config_file(str(p), {"gpus": 4}).gpus == 4
    with pytest.raises(ValueError):
        SimConfig(gpus=-1)


async def test_the_backend_reads_simulated_cards_over_http() -> None:
    sim = await start_sim(
        SimConfig(gpus=2, time_scale=50.0, reply_tokens_min=40, reply_tokens_max=60)
    )
    try:
        backend = SimGpuBackend(sim.url)
        cards = await asyncio.to_thread(backend.open)
        assert [c.name for c in cards] == ["Simulated H100 (sim)"] * 2
        assert all(c.simulated and c.backend == "sim" and c.vendor == "simulated" for c in cards)
        assert [c.bus_id for c in cards] == ["sim:0", "sim:1"]
        assert all(c.as_dict()["simulated"] is True for c in cards)
        idle = await asyncio.to_thread(backend.sample, 1.0)
        import aiohttp

        async with aiohttp.ClientSession() as session:
            msgs = [{"role": "user", "content": "hello " * 50}]
            await asyncio.gather(*(stream_chat(session, sim.url, msgs) for _ in range(4)))
        busy = await asyncio.to_thread(backend.sample, 2.0)
        assert [s.key for s in busy] == [c.key for c in cards]
        assert idle[0].power_w is not None and busy[0].power_w is not None
        assert busy[0].power_w > idle[0].power_w + 100
        assert busy[0].energy_counter_j is not None and busy[0].util_gpu is not None
        assert busy[0].util_gpu > 50
    finally:
        await sim.close()
    # the simulator gone (a restart fault): readings are empty, never an exception
    gone = await asyncio.to_thread(backend.sample, 3.0)
    assert [s.power_w for s in gone] == [None, None]


async def test_no_simulated_gpus_means_no_gpu_telemetry() -> None:
    sim = await start_sim(SimConfig())
    try:
        with pytest.raises(BackendUnavailable, match="no simulated GPUs"):
            await asyncio.to_thread(SimGpuBackend(sim.url).open)
    finally:
        await sim.close()


def test_a_run_against_the_simulator_reads_only_simulated_cards(tmp_path: Path) -> None:
    """The rule: target sim -> the simulator's cards and nothing else (NVML and hwmon are
    never opened, so a real card cannot be listed); a real server -> real cards only."""
    from stress.collectors.base import RunClock
    from stress.collectors.gpu import GpuCollector, HwmonBackend, NvmlBackend
    from stress.collectors.gpu.fake import RecordingSink
    from stress.config.scenario import load_scenario
    from stress.live.hangs import HangGate
    from stress.runtime.background import make_collectors
    from stress.runtime.target import Target

    p = tmp_path / "s.yaml"
    p.write_text("name: t\nrounds: 1\ntarget: {url: sim}\nconversation: {turn: {ask: [hi]}}\n")
    loaded = load_scenario(p)
    sink = RecordingSink()

    def gpu_backends(target: Target) -> list[Any]:
        out = make_collectors(
            loaded, sink, RunClock.start(), None, target, "vllm", HangGate(sink.event)
        )  # type: ignore[arg-type]
        gpu = next(c for c in out if isinstance(c, GpuCollector))
        return list(gpu._backends)

    sim_target = Target("http://127.0.0.1:1", {}, "m", sim=object(), time_scale=20.0)
    backends = gpu_backends(sim_target)
    assert [type(b) for b in backends] == [SimGpuBackend]
    real = gpu_backends(Target("http://127.0.0.1:1", {}, "m"))
    assert {type(b) for b in real} == {NvmlBackend, HwmonBackend}


STRESS = [sys.executable, "-m", "stress"]
SCENARIO = """\
name: sim_gpus
target:
  url: sim
  sim: {gpus: 2, time_scale: 10, reply_tokens_min: 16, reply_tokens_max: 32}
users: {count: 1}
duration: 30s
conversation:
  ceiling_tokens: 3000
  turn:
    ask: ["Summarise this.", "What is the key point?"]
request: {max_tokens: 64}
phases:
  - {name: idle, users: 1, duration: 40s, think_time: {min: 60s, max: 60s}}
  - {name: load, users: 8, duration: 40s, think_time: {min: 0s, max: 0s}}
"""


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


@pytest.mark.slow
def test_stress_run_on_the_simulator_with_gpus(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    proc = subprocess.run(
        [*STRESS, "run", str(scenario), "--no-tui", "--out", str(tmp_path), "--fail-on", "never"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    manifest = orjson.loads((run_dir / "manifest.json").read_bytes())
    assert manifest["simulated_gpus"] == 2 and manifest["time_scale"] == 10
    gpu = _jsonl(run_dir / "gpu.jsonl")
    cards = next(r for r in gpu if r["type"] == "cards")["cards"]
    # only the simulator's cards: none from NVML or hwmon, whatever this machine has
    assert len(cards) == 2
    assert all(c["simulated"] is True and c["backend"] == "sim" for c in cards)
    assert all("simulated" in c["name"].lower() for c in cards)
    collected = orjson.loads((run_dir / "collectors.json").read_bytes())["gpu"]
    assert collected["available"] is True and collected["simulated"] is True
    assert all(c["simulated"] is True for c in collected["cards"])

    # power follows the load: the idle phase (one user thinking) against the load phase
    events = _jsonl(run_dir / "events.jsonl")
    load_t = next(e["t"] for e in events if e["kind"] == "phase_started")
    samples = [r for r in gpu if r["type"] == "sample"]
    key = cards[0]["key"]
    # the cards were opened once the first request had been written (stress.runtime.run's
    # GPU_OPEN_WAIT_S): their start-up shares the interpreter, it must not delay that one
    first_sent = min(r["t_start"] for r in _jsonl(run_dir / "requests.jsonl"))
    assert samples[0]["t"] >= first_sent, (samples[0]["t"], first_sent)

    def card(r: dict[str, Any]) -> dict[str, Any]:
        return next(c for c in r["cards"] if c["key"] == key)

    idle = [card(r)["power_w"] for r in samples if 1.5 <= r["t"] < load_t - 0.2]
    busy = [card(r)["power_w"] for r in samples if load_t + 1.5 <= r["t"] < load_t + 3.5]
    assert idle and busy, samples
    assert max(idle) < 150 and min(busy) > 400, (idle, busy)

    # energy = the integral of power over the run's simulated clock: each reading's power
    # is the mean since the previous reading, so the right-hand sum is the integral
    for k in (c["key"] for c in cards):
        series = [(r["t"] * 10, c) for r in samples for c in r["cards"] if c["key"] == k]
        integral = sum(c["power_w"] * (t - t0) for (t0, _), (t, c) in itertools.pairwise(series))
        energy = series[-1][1]["energy_j"]
        assert energy == pytest.approx(integral, rel=0.03), (energy, integral)
        summary_card = next(c for c in collected["cards"] if c["key"] == k)
        assert summary_card["energy_j"] == pytest.approx(energy, rel=1e-6)
        assert summary_card["energy_source"] == "counter"
        assert summary_card["seconds"] == pytest.approx(series[-1][0] - series[0][0], rel=0.01)

    report = (run_dir / "report.md").read_text(encoding="utf-8")
    section = report[report.index("GPUs (simulated)") :]
    assert "Simulated H100 (sim) [sim:0]" in section and "no real card was read" in section
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    assert "GPUs (simulated)" in html
    assert not math.isnan(collected["energy_j"]) and collected["j_per_token"] > 0
