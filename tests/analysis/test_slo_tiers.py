"""SLO tiers (``slo.tiers``): each judged on the SLO's own figures, listed beside it in the
verdict and summary.json, and never grading the run (issue 35)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from stress.analysis.judge import make_verdict, slo_checks, tier_checks
from stress.analysis.rundata import load_run
from stress.core.fmt import times
from stress.report.summary import build_summary, render_summary
from tests.report.synth import manifest, request, write_run


def _run(tmp_path: Path, slo: dict[str, Any]) -> Path:
    reqs = [
        request(u, i, float(i * 10 + u), ttft=1.0 + 0.1 * u) for u in range(8) for i in range(1, 6)
    ]
    return write_run(tmp_path, manifest(users=8, slo=slo), reqs)


def test_each_tier_is_judged_on_the_slo_figures_and_never_grades(tmp_path: Path) -> None:
    slo = {
        "ttft_p95": 5.0,
        "tiers": {"interactive": {"ttft_p95": 1.2}, "batch": {"ttft_p95": 30.0}},
    }
    d = _run(tmp_path, slo)
    run = load_run(d)
    tiers = tier_checks(run)
    assert list(tiers) == ["interactive", "batch"]
    [main] = slo_checks(run)
    [fast] = tiers["interactive"]
    [slow] = tiers["batch"]
    assert fast.value == slow.value == main.value  # one figure, three limits
    assert fast.interval == main.interval
    assert fast.status == "MISSED" and slow.status == "MET"
    verdict = make_verdict(run)
    plain = make_verdict(load_run(_run(tmp_path / "plain", {"ttft_p95": 5.0})))
    assert verdict.findings == plain.findings  # the main SLO held; a missed tier does not grade
    assert "slo" not in {f.code for f in verdict.findings}
    assert f"SLO tier interactive: {fast.text()}." in verdict.items
    summary = build_summary(d)
    doc = summary["verdict"]
    assert f"SLO tier interactive: {fast.text()}." in render_summary(summary).splitlines()
    assert doc["slo_tiers"]["interactive"][0]["status"] == "MISSED"
    assert doc["slo_tiers"]["batch"][0]["factor"] == pytest.approx(slow.factor)


def test_a_run_without_tiers_has_none(tmp_path: Path) -> None:
    d = _run(tmp_path, {"ttft_p95": 5.0})
    assert tier_checks(load_run(d)) == {}
    assert build_summary(d)["verdict"]["slo_tiers"] == {}


def test_a_tier_without_a_limit_is_one_line(tmp_path: Path) -> None:
    """``stress validate`` (the real CLI) names the file, the field and the fix."""
    path = tmp_path / "t.yaml"
    path.write_text("name: t\ntarget: {url: sim}\nslo: {ttft_p95: 2s, tiers: {batch: {}}}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "stress", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "t.yaml" in line and "slo.tiers.batch" in line and "fix: give it ttft_p95" in line


def test_ls_lists_each_tier_beside_the_slo(tmp_path: Path) -> None:
    """``stress ls`` (the real CLI): a column and a CSV field with each tier's grade, the
    verdict's own (its factor is the check's); a listing without tiers has no column."""
    slo = {"ttft_p95": 5.0, "tiers": {"interactive": {"ttft_p95": 1.2}, "batch": {"ttft_p95": 30}}}
    d = _run(tmp_path / "tiered", slo)
    _run(tmp_path / "plain", {"ttft_p95": 5.0})
    [fast] = tier_checks(load_run(d))["interactive"]

    def ls(*args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "stress", "ls", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    shown = ls(str(tmp_path))
    assert "SLO tiers" in shown.splitlines()[0]
    want = f"interactive MISSED {times(fast.factor or 0.0)}, batch MET"
    assert want in shown
    assert "SLO tiers" not in ls(str(tmp_path / "plain"))
    out_csv = tmp_path / "runs.csv"
    ls(str(tmp_path), "--csv", str(out_csv))
    header, *lines = out_csv.read_text().splitlines()
    assert "slo_tiers" in header.split(",")
    assert any(want in line for line in lines)
