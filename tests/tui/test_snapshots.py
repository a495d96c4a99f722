"""Screen snapshots at 80x24, 120x40 and 160x50 from fixed data, compared as plain text.

At 80 columns the users table leaves out its least useful columns (round, retention)
instead of cropping; from 120 columns on it shows them all. A progress line that would be
cut beside the badge is shown compact, so TTFT and tok/s stay on screen.

The stored screens are in ``tests/tui/snapshots/``. After an intended layout change,
regenerate them with ``STRESS_UPDATE_SNAPSHOTS=1 pytest tests/tui/test_snapshots.py`` and
read the diff before committing. Data and clock are fixed (the snapshot's ``t`` is the only
time the UI shows), so the text is the same on every machine.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.tui.data import snapshot
from tests.tui.helpers import Source, make_app, screen_text

SNAPSHOTS = Path(__file__).with_name("snapshots")
UPDATE = os.environ.get("STRESS_UPDATE_SNAPSHOTS") == "1"
NARROW = ("user", "state", "conv tok", "TTFT", "tok/s", "cached", "ok", "err", "empty", "stall")
WIDE = (*NARROW, "rnd", "retain")


@pytest.mark.parametrize(
    ("width", "height", "columns"), [(80, 24, NARROW), (120, 40, WIDE), (160, 50, WIDE)]
)
async def test_screen_matches_snapshot(width: int, height: int, columns: tuple[str, ...]) -> None:
    app = make_app(Source(snapshot()))
    async with app.run_test(size=(width, height)) as pilot:
        await pilot.pause()
        app.tick()
        await pilot.pause()
        text = screen_text(app)
    lines = text.splitlines()
    assert len(lines) == height and max(len(line) for line in lines) <= width
    header = next(line for line in lines if "conv tok" in line)
    assert all(c in header for c in columns), header  # the columns that fit, never cropped
    assert "1st token 23s" in text and "silent 12s" in text and "thinking 4s" in text
    assert sum(1 for line in lines if line.lstrip("│ ").startswith("u")) >= 8
    if width >= 120:  # the progress line is never cut before TTFT and tok/s: compact instead
        assert "TTFT 2.25s · 61 tok/s" in lines[1], lines[1]
    path = SNAPSHOTS / f"screen_{width}x{height}.txt"
    if UPDATE or not path.exists():
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if not UPDATE:
            pytest.fail(f"{path.name} was missing and has been written; check it and rerun")
    assert text == path.read_text(encoding="utf-8")
