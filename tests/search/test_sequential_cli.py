"""The real ``stress capacity`` on the simulator decides each step sequentially: a step
whose first passes leave the SLO inside their spread runs another, and every status in
capacity.json is the decision its own passes give (issue 35)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from stress.search.steps import decide
from tests.search.test_capacity_cli import SCENARIO, stress


@pytest.mark.slow
def test_each_step_runs_passes_until_decided(tmp_path: Path) -> None:
    path = tmp_path / "slots.yaml"
    path.write_text(SCENARIO)
    out = tmp_path / "out"
    # steps 4, 6 (or 8), 5 users, 2-3 passes each: about a minute on a quiet 2-core machine
    proc = stress(
        "capacity",
        str(path),
        "--out",
        str(out),
        "--start",
        "4",
        "--max-users",
        "6",
        "--repeat",
        "2",
        "--max-repeat",
        "3",
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "x 2-3 passes" in proc.stdout  # the bound counts the extra passes
    (root,) = out.iterdir()
    doc = orjson.loads((root / "capacity.json").read_bytes())
    assert doc["settings"]["max_repeat"] == 3 and doc["settings"]["confidence"] == 0.9
    for step in doc["steps"]:
        factors = step["factors"]
        first_two = decide(factors[:2], 0.9, 3)
        assert len(factors) == (3 if first_two == "UNDECIDED" else 2), step
        assert step["status"] == decide(factors, 0.9, 3), step
        assert len(step["run_dirs"]) == len(factors)
    assert doc["undecided"] == [s["value"] for s in doc["steps"] if s["status"] == "UNDECIDED"]
    # the simulator's 4 sequences (vLLM dialect): the step above them names the batch
    assert "first limit: waiting for room in the running batch" in doc["answer_line"]
    if doc["undecided"]:
        assert "UNDECIDED at" in doc["answer"]


def test_max_repeat_below_repeat_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "slots.yaml"
    path.write_text(SCENARIO)
    proc = stress("capacity", str(path), "--repeat", "3", "--max-repeat", "2", timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "stress capacity: max_repeat (2) is below repeat (3) -- fix: max_repeat at least repeat"
    ]
