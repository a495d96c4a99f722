"""The quick start's simulated GPUs in the live view: the GPU panel shows them, labelled.

One test from fixed data (the panel's title, bus and name columns), one through the real
run path: the bundled ``quickstart`` scenario (time-scaled so the test is short) with the
TUI in Textual's headless mode, until the GPU panel shows both simulated cards under load.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from textual.pilot import Pilot

import stress.tui
from stress.bundled import bundled_scenario
from stress.run import execute
from stress.scenario import load_scenario
from stress.tui.app import StressApp
from stress.tui.widgets.cards import CardsTable
from tests.tui.data import snapshot
from tests.tui.helpers import Source, make_app, screen_text

SIM_CARD = {
    "name": "Simulated H100 (sim)",
    "simulated": True,
    "util": 87.0,
    "power_w": 575.0,
    "power_limit_w": 700.0,
    "temp_c": 71.0,
    "sm_mhz": 1980,
    "mem_used_mib": 73403,
    "throttle": [],
    "energy_j": 52_000.0,
}


async def test_simulated_cards_are_labelled_in_the_gpu_panel() -> None:
    cards = [{**SIM_CARD, "key": f"SIM-{i}", "bus_id": f"sim:{i}"} for i in range(2)]
    snap = replace(snapshot(), collectors={"gpu": {"available": True, "cards": cards}})
    app = make_app(Source(snap), events=False)
    async with app.run_test(size=(160, 50)):
        text = screen_text(app)
        assert "GPUs (simulated)" in text
        rows = [line for line in text.splitlines() if "H100 (sim)" in line]
        assert len(rows) == 2 and "sim:0" in rows[0] and "sim:1" in rows[1], rows
        assert "575/700W" in rows[0]
    app = make_app(Source(snapshot()), events=False)  # real cards: the title says nothing
    async with app.run_test(size=(160, 50)):
        assert app.query_one(CardsTable).border_title == "GPUs"


@pytest.mark.slow
async def test_the_quick_start_shows_its_simulated_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped = bundled_scenario("quickstart")
    assert shipped is not None
    data: dict[str, Any] = yaml.safe_load(shipped.read_text())
    assert data["target"]["sim"]["gpus"] == 2  # the shipped demo has its GPU panel
    data["target"]["sim"]["time_scale"] = 20
    path = tmp_path / "quickstart.yaml"
    path.write_text(yaml.safe_dump(data))
    apps: list[StressApp] = []

    class HeadlessSink(stress.tui.TuiSink):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, headless=True, size=(160, 50), on_app=apps.append, **kwargs)

    monkeypatch.setattr(stress.tui, "TuiSink", HeadlessSink)
    seen: list[str] = []

    async def wait_for_busy_cards_then_quit() -> None:
        while not apps or not apps[0].is_running:
            await asyncio.sleep(0.05)
        app = apps[0]
        for _ in range(400):  # up to 20 s
            cards = (app.last.collectors.get("gpu") or {}).get("cards") if app.last else None
            if cards and all((c.get("util") or 0) > 30 for c in cards):
                await asyncio.sleep(0.3)  # let the panel repaint
                seen.append(screen_text(app))
                break
            await asyncio.sleep(0.05)
        await Pilot(app).press("q")

    presser = asyncio.create_task(wait_for_busy_cards_then_quit())
    await asyncio.wait_for(execute(load_scenario(path), tmp_path / "out", ui="tui"), 90)
    await presser
    assert seen, "the GPU panel never showed busy simulated cards"
    text = seen[0]
    assert "GPUs (simulated)" in text
    rows = [line for line in text.splitlines() if "H100 (sim)" in line]
    assert len(rows) == 2 and "sim:0" in rows[0] and "sim:1" in rows[1], text
    assert "NVIDIA" not in text  # no real card beside the simulated ones
