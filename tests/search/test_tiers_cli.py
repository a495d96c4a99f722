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
