"""The live badge judges the scenario's SLO tiers (``slo.tiers``) on the figures the SLO is
judged on, on a line of its own: ``tiers: interactive ✖x1.5 · batch ✓``. They never
change the level, as in the verdict, and the line keeps inside the terminal."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from stress.live.state import Snapshot
from stress.tui import TuiSink
from stress.tui.verdict import judge
from stress.tui.widgets.header import RunHeader, badge_label, tiers_line
from tests.tui.data import HEADER, snapshot
from tests.tui.helpers import Source, screen_text

SLO: dict[str, Any] = {
    "ttft_p95": 5.0,
    "tiers": {
        "batch": {"ttft_p95": 30.0, "decode_tok_s_p50": 5.0},
        "interactive": {"ttft_p95": 2.0},
    },
}


def clean(**over: Any) -> Snapshot:
    """A healthy run so far: TTFT p95 3 s over 40 requests, decode p50 20 tok/s."""
    return replace(
        snapshot(gpus=False),
        outcomes={"ok": 40, "error": 0, "empty": 0, "reasoning_only": 0, "truncated": 0},
        collectors={"server": {"restarts": 0, "up": True, "preemptions": 0}},
        **{"ttft_p95_run": 3.0, "ttft_n": 40, "decode_p50_run": 20.0, "decode_n": 40, **over},
    )


def test_tiers_are_judged_like_the_slo_and_never_change_the_level() -> None:
    v = judge(clean(), Counter(), 0, 0, SLO)
    assert v.level == "ok" and v.reasons == ()  # the SLO (5 s) is met
    assert v.tiers == ("interactive ✖x1.5", "batch ✓")  # missed first
    slow = judge(clean(decode_p50_run=2.0), Counter(), 0, 0, SLO)
    assert slow.tiers == ("batch ✖x2.5", "interactive ✖x1.5")  # worst first
    few = judge(clean(ttft_n=5, decode_n=5), Counter(), 0, 0, SLO)
    assert few.tiers == ("batch ? n=5", "interactive ? n=5")
    assert judge(clean(), Counter(), 0, 0, {"ttft_p95": 5.0}).tiers == ()
    assert judge(clean(ttft_p95_run=None, decode_p50_run=None), Counter(), 0, 0, SLO).tiers == ()


def test_the_badge_names_the_tiers_on_a_line_of_their_own() -> None:
    v = judge(clean(), Counter(), 0, 0, SLO)
    assert badge_label(v) == "● OK\ntiers: interactive ✖x1.5 · batch ✓"
    bad = judge(clean(), Counter({"restart": 1}), 0, 0, SLO)
    assert badge_label(bad) == "✖ PROBLEM\n1 restart\ntiers: interactive ✖x1.5 · batch ✓"
    assert tiers_line(("a ✓", "b ✓", "c ✓", "d ✓", "e ✓")) == "tiers: a ✓ · b ✓ · c ✓ +2"


@pytest.mark.parametrize("width", [80, 120, 200])
async def test_the_tier_line_fits_the_terminal(width: int) -> None:
    source = Source(clean())
    sink = TuiSink({**HEADER, "slo": SLO}, source, source.quit, source.cancel, headless=True)
    app = sink.build_app()
    async with app.run_test(size=(width, 24)) as pilot:
        app.tick()
        await pilot.pause()
        lines = screen_text(app).splitlines()
        assert max(len(line) for line in lines) <= width
        assert "● OK" in lines[0] and "tiers: inter" in lines[1], lines[:3]
        if width >= 120:
            assert lines[1].rstrip().endswith("tiers: interactive ✖x1.5 · batch ✓"), lines[1]
        assert app.query_one(RunHeader).size.height == 2  # no reasons: two rows still
        source.current = replace(clean(), outcomes={**clean().outcomes, "empty": 3})
        app.tick()
        await pilot.pause()
        lines = screen_text(app).splitlines()
        assert "▲ CHECK" in lines[0] and "3 empty/cut" in lines[1] and "tiers:" in lines[2]
        assert app.query_one(RunHeader).size.height == 3  # reasons and tiers: one row more
        assert max(len(line) for line in lines) <= width
