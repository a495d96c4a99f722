"""The quick start's simulated GPUs in the live view: the GPU panel shows them, labelled.

One test from fixed data (the panel's title, bus and name columns), one through the real
CLI in a real pseudo-terminal: the bundled ``quickstart`` scenario (time-scaled so the test
is short), until the GPU panel on the screen shows both simulated cards under load.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from stress.config.bundled import bundled_scenario
from stress.tui.widgets.cards import CardsTable
from tests.terminal import Terminal
from tests.tui.data import snapshot
from tests.tui.helpers import Source, make_app, screen_text
from tests.tui.test_run_e2e import END_S, START_S

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
def test_the_quick_start_shows_its_simulated_gpus(tmp_path: Path) -> None:
    shipped = bundled_scenario("quickstart")
    assert shipped is not None
    data: dict[str, Any] = yaml.safe_load(shipped.read_text())
    assert data["target"]["sim"]["gpus"] == 2  # the shipped demo has its GPU panel
    data["target"]["sim"]["time_scale"] = 20
    path = tmp_path / "quickstart.yaml"
    path.write_text(yaml.safe_dump(data))

    def busy_cards() -> bool:
        rows = [line for line in term.screen().splitlines() if "H100 (sim)" in line]
        return len(rows) == 2 and all(_util(r) > 30 for r in rows)

    term = Terminal(["run", str(path), "--out", str(tmp_path / "out")], tmp_path, (160, 50))
    try:
        term.wait_for(lambda: "conv tok" in term.screen(), START_S, "the live view")
        term.wait_for(busy_cards, END_S, "both simulated cards busy in the GPU panel")
        text = term.screen()
        term.send(b"q")
        assert term.wait(END_S) == 0
    finally:
        term.close()
    assert "GPUs (simulated)" in text
    rows = [line for line in text.splitlines() if "H100 (sim)" in line]
    assert len(rows) == 2 and "sim:0" in rows[0] and "sim:1" in rows[1], text
    assert "NVIDIA" not in text  # no real card beside the simulated ones


def _util(row: str) -> float:
    """The utilisation column of a GPU row (``87%``), 0 when not shown yet."""
    cells = [c for c in row.replace("│", " ").split() if c.endswith("%")]
    return float(cells[0].rstrip("%")) if cells and cells[0][:-1].isdigit() else 0.0
