"""Energy: counter increments, wrap, driver reload, power integration, a real H200 replay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stress.collectors.gpu.energy import EnergyAccumulator
from stress.collectors.gpu.fake import UUID_A, FakeCard, FakeNvml
from stress.collectors.gpu.nvml import NvmlBackend

FIXTURE = Path(__file__).parents[2] / "fixtures" / "nvml-h200" / "nvml_samples.jsonl"


def test_nvml_units_are_converted() -> None:
    card = FakeCard(
        UUID_A,
        "00000000:3B:00.0",
        power_mw=123_456,
        energy_mj=2_500_000,
        limit_mw=700_000,
        mem_used=7_448_952_832,
    )
    b = NvmlBackend(FakeNvml([card]))
    b.open()
    s = b.sample(1.0)[0]
    assert s.power_w == pytest.approx(123.456)
    assert s.power_limit_w == pytest.approx(700.0)
    assert s.energy_counter_j == pytest.approx(2500.0)
    assert s.mem_used_mib == pytest.approx(7_448_952_832 / 2**20)
    assert s.mem_total_mib == pytest.approx(143_771.0)
    assert s.temp_mem_c == 45.0
    assert (s.sm_mhz, s.mem_mhz) == (1980, 3201)
    b.close()


def test_sums_increments_not_endpoints() -> None:
    acc = EnergyAccumulator()
    for i, counter in enumerate([100.0, 300.0, 500.0, 700.0]):
        acc.add(float(i), counter, power_w=200.0, max_power_w=700.0)
    assert acc.total_j == pytest.approx(600.0)
    assert acc.source == "counter"


def test_counter_wrap_is_an_increment() -> None:
    acc = EnergyAccumulator()
    acc.add(0.0, 990.0, 100.0, wraps_at_j=1000.0, max_power_w=700.0)
    acc.add(1.0, 90.0, 100.0, wraps_at_j=1000.0, max_power_w=700.0)
    assert acc.total_j == pytest.approx(100.0)
    assert acc.wraps == 1 and acc.resets == 0


def test_driver_reload_bridges_with_power() -> None:
    acc = EnergyAccumulator()
    acc.add(0.0, 5_000_000.0, 150.0, wraps_at_j=float(2**64) / 1000, max_power_w=700.0)
    acc.add(1.0, 5_000_150.0, 150.0, wraps_at_j=float(2**64) / 1000, max_power_w=700.0)
    # Driver reloaded: the counter starts again near zero.
    acc.add(2.0, 40.0, 250.0, wraps_at_j=float(2**64) / 1000, max_power_w=700.0)
    acc.add(3.0, 290.0, 250.0, wraps_at_j=float(2**64) / 1000, max_power_w=700.0)
    # 150 (counter) + 200 (trapezoid 150..250 over 1 s) + 250 (counter)
    assert acc.total_j == pytest.approx(600.0)
    assert acc.resets == 1
    assert acc.source == "mixed"


def test_impossible_jump_is_not_trusted() -> None:
    acc = EnergyAccumulator()
    acc.add(0.0, 0.0, 100.0, max_power_w=700.0)
    acc.add(1.0, 1_000_000.0, 100.0, max_power_w=700.0)
    assert acc.total_j == pytest.approx(100.0)


def test_no_counter_integrates_power() -> None:
    acc = EnergyAccumulator()
    for i, p in enumerate([100.0, 200.0, 200.0]):
        acc.add(float(i), None, p)
    assert acc.total_j == pytest.approx(150.0 + 200.0)
    assert acc.source == "power_integral"


def test_h200_replay_average_power_from_counter_deltas() -> None:
    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]
    assert len(rows) > 20
    acc = EnergyAccumulator()
    for r in rows:
        acc.add(r["t"], r["energy_mj"] / 1000.0, r["power_mw"] / 1000.0, max_power_w=700.0)
    duration = rows[-1]["t"] - rows[0]["t"]
    avg_w = acc.total_j / duration
    assert avg_w == pytest.approx(159.0, abs=1.5)
    assert acc.source == "counter" and acc.resets == 0
    # The same figure as the two endpoints here (no reset in this capture).
    endpoints = (rows[-1]["energy_mj"] - rows[0]["energy_mj"]) / 1000.0
    assert acc.total_j == pytest.approx(endpoints)
