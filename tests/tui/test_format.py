"""Pure formatting and the verdict: missing values are dashes, the badge names reasons."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from stress.tui import format as f
from stress.tui.verdict import judge
from tests.tui.data import card, snapshot


def test_numbers_and_missing_values() -> None:
    assert [f.secs(None), f.secs(0.4213), f.secs(33.2), f.secs(92), f.secs(270)] == [
        "-", "0.42s", "33.2s", "92s", "4m30s",
    ]  # fmt: skip
    assert [f.tokens(950), f.tokens(9_876), f.tokens(12_345), f.tokens(1_200_000)] == [
        "950", "9.9k", "12k", "1.2M",
    ]  # fmt: skip
    assert f.pct(0.41) == "41%" and f.pct(75.0, ratio=False) == "75%" and f.pct(None) == "-"
    assert f.clock(3723) == "1:02:03" and f.clock(65) == "1:05"
    assert f.spark([0, 1, 2, 4], 3) == "▃▅█" and f.spark([], 5) == ""


def test_card_cells_tolerate_any_missing_key() -> None:
    assert f.card_cells({}, 2) == ("2", "-", "-", "-", "-", "-", "-", "-", "-", "")
    cells = f.card_cells(card(0), 0)
    assert cells[2:9] == ("97%", "220/220W", "79°C", "1695", "22.6G", "sw_power_cap", "512kJ")
    assert f.gpu_cards({"available": False, "cards": []}) == []
    assert f.gpu_cards([{"name": "x"}, "junk"]) == [{"name": "x"}]
    assert f.total_power([card(0), card(1), {"name": "no power"}]) == 219.6 + 220.6


def test_verdict_levels() -> None:
    clean = replace(
        snapshot(gpus=False),
        outcomes={"ok": 5, "error": 0, "empty": 0, "reasoning_only": 0, "truncated": 0},
        collectors={"server": {"restarts": 0, "up": True, "preemptions": 0}},
    )
    assert judge(clean, Counter(), 0, 0).level == "ok"
    empty = replace(clean, outcomes={**clean.outcomes, "empty": 2})
    assert judge(empty, Counter(), 0, 0).reasons == ("2 empty/cut",)
    v = judge(clean, Counter({"restart": 1, "hang_suspected": 1}), 0, 1)
    assert v.level == "bad" and v.reasons == ("hang now", "1 restart", "1 hw error")
    healed = judge(clean, Counter({"hang_suspected": 1, "hang_cleared": 1}), 0, 0)
    assert healed.level == "bad" and healed.reasons == ("1 hang",)  # as the verdict counts it
    few = replace(clean, outcomes={**clean.outcomes, "ok": 995, "error": 5})
    assert judge(few, Counter(), 0, 0).level == "warn"  # 0.5% failed: under slo.error_rate
    many = replace(clean, outcomes={**clean.outcomes, "ok": 95, "error": 5})
    assert judge(many, Counter(), 0, 0).reasons == ("5 errors (5.0%)",)
    unwritten = judge(clean, Counter({"record_failed": 2}), 0, 0)  # as the verdict grades it
    assert unwritten.level == "warn" and unwritten.reasons == ("2 failed records",)
