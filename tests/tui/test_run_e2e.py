"""The real run path with the TUI: ``execute(..., ui="tui")`` against the built-in
simulator, the app in Textual's headless mode, ``q`` pressed mid-run.

Quitting must never lose the run: the run directory ends with a complete manifest
(exit reason ``interrupted``) and a summary.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from textual.pilot import Pilot

import stress.tui
from stress.run import execute
from stress.scenario import load_scenario
from stress.tui.app import StressApp
from stress.tui.widgets.users import UsersTable

ROOT = Path(__file__).resolve().parents[2]


def scenario(tmp_path: Path) -> Any:
    p = tmp_path / "s.yaml"
    p.write_text(f"""\
name: tui_e2e
target: {{url: sim, sim: {{time_scale: 20, reply_tokens_min: 16, reply_tokens_max: 48}}}}
users: {{count: 4, think_time: {{min: 0s, max: 0.05s}}}}
duration: 120s
conversation:
  cache: per_user
  ceiling_tokens: 20000
  turn:
    paste: {{corpus: {ROOT / "corpora" / "en"}, tokens: [200, 400]}}
    ask: ["Q1?", "Q2?"]
warmup: {{rounds: 1}}
""")
    return load_scenario(p)


@pytest.mark.slow
async def test_q_in_the_tui_ends_the_run_with_files_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    apps: list[StressApp] = []

    class HeadlessSink(stress.tui.TuiSink):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, headless=True, size=(120, 40), on_app=apps.append, **kwargs)

    monkeypatch.setattr(stress.tui, "TuiSink", HeadlessSink)

    async def press_q_when_requests_finished() -> None:
        while not apps or not apps[0].is_running or apps[0].last is None:
            await asyncio.sleep(0.05)
        app = apps[0]
        for _ in range(200):  # up to 10 s
            if app.last is not None and app.last.rounds_done >= 4:
                break
            await asyncio.sleep(0.05)
        assert app.query_one(UsersTable).row_count == 4
        await Pilot(app).press("q")

    presser = asyncio.create_task(press_q_when_requests_finished())
    outcome = await asyncio.wait_for(execute(scenario(tmp_path), tmp_path / "out", ui="tui"), 60)
    await presser
    assert not apps[0].is_running
    manifest = orjson.loads((outcome.run_dir / "manifest.json").read_bytes())
    assert manifest["exit_reason"] == "interrupted" == outcome.exit_reason
    assert manifest["end_time"] is not None
    assert (outcome.run_dir / "summary.json").exists()
    records = (outcome.run_dir / "requests.jsonl").read_bytes().splitlines()
    assert len(records) >= 4
