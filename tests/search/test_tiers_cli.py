"""The real ``stress capacity`` on the simulator answers each SLO tier from the same passes
as the SLO, running steps of its own only where those passes leave its bracket wide
(issue 35: "several SLO tiers from the same passes, one bracket per tier")."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.search.test_capacity_cli import SCENARIO, SLOTS, stress

TIERED = SCENARIO.replace(
    "slo: {ttft_p95: 0.4s}", "slo: {ttft_p95: 0.4s, tiers: {batch: {ttft_p95: 1s}}}"
)


@pytest.mark.slow
def test_a_tier_gets_its_own_bracket_from_the_same_passes(tmp_path: Path) -> None:
    path = tmp_path / "tiered.yaml"
    path.write_text(TIERED)
    out = tmp_path / "out"
    # 4 slots: the SLO breaks at 5 users (one waits a reply), the batch tier at 9 (one waits
    # two); steps 2, 4, 8, 6, 5, then 12, 10, 9 for the tier: ~35 s on a quiet 2-core machine
    proc = stress(
        "capacity", str(path), "--out", str(out), "--start", "2", "--repeat", "1",
        "--max-users", "12", timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    (root,) = out.iterdir()
    doc = orjson.loads((root / "capacity.json").read_bytes())
    values = [s["value"] for s in doc["steps"]]
    assert values[:5] == [2, 4, 8, 6, 5] and doc["bracket"] == [SLOTS, SLOTS + 1]
    tier = doc["tiers"]["batch"]
    assert tier["criterion"] == "TTFT p95 <= 1 s"
    lo, hi = tier["bracket"]
    assert hi == lo + 1 and lo >= 2 * SLOTS  # each user waits at most one reply up to 8
    # the tier judged every step (its own steps and the SLO's), and ran only above the
    # SLO's steps: the five passes already told it 2-8 users met
    assert [s["value"] for s in tier["steps"]] == values
    assert all(v > 8 for v in values[5:]) and len(values) > 5
    assert {s["value"]: s["status"] for s in tier["steps"]}[8] == "MET"
    line = f"SLO tier batch (TTFT p95 <= 1 s): {lo} users [{lo}-{hi}]"
    assert line in proc.stdout
    assert (
        f"SLO tier batch (TTFT p95 <= 1 s): {tier['answer']}." in (root / "capacity.md").read_text()
    )
    # each pass judged the tier in its own summary.json, as its verdict shows it
    first = root / doc["steps"][0]["run_dirs"][0] / "summary.json"
    verdict = orjson.loads(first.read_bytes())["verdict"]
    assert verdict["slo_tiers"]["batch"][0]["status"] == "MET"
    assert any(i.startswith("SLO tier batch: TTFT p95") for i in verdict["items"])


@pytest.mark.slow
def test_a_grid_answers_each_tier_at_every_row(tmp_path: Path) -> None:
    path = tmp_path / "tiered.yaml"
    path.write_text(TIERED)
    out = tmp_path / "out"
    # the same 4 slots at 500 and 1,000 tokens of history (held whole by the KV pool, so
    # neither moves a bracket): each row steps 4, 8, 6, 5 for the SLO, then 9 for the tier,
    # the second row from the first row's answer: ten steps, ~45 s on a quiet 2-core machine
    proc = stress(
        "capacity", str(path), "--out", str(out), "--axis", "grid", "--lengths", "500,1000",
        "--start", "4", "--max-users", "9", "--repeat", "1", timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "a grid answers the main SLO only" not in proc.stdout
    (root,) = out.iterdir()
    doc = orjson.loads((root / "capacity.json").read_bytes())
    assert [r["length"] for r in doc["rows"]] == [500, 1000]
    answers = []
    for row in doc["rows"]:
        assert row["bracket"] == [SLOTS, SLOTS + 1], row["steps"]
        tier = row["tiers"]["batch"]
        assert tier["criterion"] == "TTFT p95 <= 1 s" and tier["stop"] is not None
        # the tier judged every step of its row: the SLO's four, then its own above them
        values = [s["value"] for s in tier["steps"]]
        assert values[:4] == [s["value"] for s in row["steps"]][:4] == [4, 8, 6, 5]
        assert {s["value"]: s["status"] for s in tier["steps"]}[8] == "MET"
        lo, hi = tier["bracket"]
        assert lo >= 2 * SLOTS and hi in (lo + 1, None), tier["steps"]
        line = f"{row['length']:,} tokens of history: SLO tier batch (TTFT p95 <= 1 s): "
        assert tier["answer_line"].startswith(line + tier["answer"])
        assert tier["answer_line"] in proc.stdout  # printed as its row ends
        answers.append(f"{row['length']:,} tokens: {tier['answer']}")
    head = "capacity map at SLO tier batch (TTFT p95 <= 1 s), by tokens of history: "
    assert doc["tiers"]["batch"]["answer_line"] == head + "; ".join(answers)
    assert head + "; ".join(answers) in proc.stdout
    # the map gives each tier a column of its own, in the terminal and in the report
    assert "tier batch" in proc.stdout.split("capacity map (users x tokens")[1]
    md = (root / "capacity.md").read_text()
    assert "| capacity | tier batch |" in md
    assert "SLO tier batch (TTFT p95 <= 1 s), by tokens of history: " + "; ".join(answers) in md
