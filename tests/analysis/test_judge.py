"""The one judge: health rules on counts, SLO grades with their factor, the exit-code gate.

Each case is a defect of issue 13: an SLO miss was only WARN whatever its size, a run with
0 requests, lost records or crashed users read PASS, the exit code ignored the verdict, and
every run read WARN (a note such as a re-sent pooled connection graded the run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stress.analysis.judge import (
    Finding,
    HealthCounts,
    SloCheck,
    grade,
    health_findings,
    make_verdict,
)
from stress.analysis.limits import EXIT_VERDICT_FAIL, MIN_SAMPLES, exit_code
from stress.analysis.rundata import load_run
from tests.report.synth import event, kill, manifest, request, write_run


def check(value: float | None, limit: float, n: int = 100, worse: bool = True) -> SloCheck:
    return SloCheck("TTFT p95", "s", limit, value, n, None, worse)


@pytest.mark.parametrize(
    ("value", "status", "level"),
    [
        (4.0, "MET", None),
        (10.0, "MET", None),  # at the limit is within it
        (11.4, "MISSED", "WARN"),
        (20.0, "MISSED", "WARN"),  # exactly 2x: still a WARN
        (20.1, "MISSED", "FAIL"),
        (190.0, "MISSED", "FAIL"),  # 19x the SLO no longer reads like 1.1x
    ],
)
def test_slo_grade_follows_the_factor(value: float, status: str, level: str | None) -> None:
    c = check(value, 10.0)
    assert c.status == status
    assert c.factor == pytest.approx(value / 10.0)
    f = c.finding()
    assert (f.level if f else None) == level


def test_decode_floor_factor_is_how_far_below() -> None:
    c = check(2.0, 5.0, worse=False)
    assert c.status == "MISSED" and c.factor == pytest.approx(2.5)
    assert c.finding() == Finding("FAIL", "slo", "TTFT p95 x2.5 SLO")
    assert "vs SLO ≥ 5 s: MISSED x2.5" in c.text()


def test_slo_on_too_few_samples_is_not_judged() -> None:
    c = check(190.0, 10.0, n=MIN_SAMPLES - 1)
    assert c.status == "NOT JUDGED"
    assert c.finding() == Finding("WARN", "slo_not_judged", f"TTFT p95 n={MIN_SAMPLES - 1}")
    assert f"not judged (n = {MIN_SAMPLES - 1} < {MIN_SAMPLES})" in c.text()


def test_error_rate_decides_between_warn_and_fail() -> None:
    few = health_findings(HealthCounts(requests=1000, errors=10, error_rate_limit=0.01))
    many = health_findings(HealthCounts(requests=1000, errors=11, error_rate_limit=0.01))
    assert [(f.level, f.short) for f in few] == [("WARN", "10 errors (1.0%)")]
    assert [(f.level, f.short) for f in many] == [("FAIL", "11 errors (1.1%)")]


@pytest.mark.parametrize(
    "counts",
    [
        HealthCounts(hangs=1),
        HealthCounts(restarts=1),
        HealthCounts(downs=1),
        HealthCounts(hardware=2),
        HealthCounts(users_crashed=1),
        HealthCounts(recorder_failed=1),
    ],
)
def test_each_failure_kind_fails(counts: HealthCounts) -> None:
    assert grade(health_findings(counts)) == "FAIL"


def test_fail_reasons_come_first() -> None:
    found = health_findings(HealthCounts(preemptions=3, odd_replies=2, hangs=1))
    assert [f.level for f in found] == ["FAIL", "WARN", "WARN"]


@pytest.mark.parametrize(
    ("status", "fail_on", "code"),
    [
        ("PASS", "fail", 0),
        ("WARN", "fail", 0),
        ("FAIL", "fail", EXIT_VERDICT_FAIL),
        ("PASS", "warn", 0),
        ("WARN", "warn", EXIT_VERDICT_FAIL),
        ("FAIL", "warn", EXIT_VERDICT_FAIL),
        ("FAIL", "never", 0),
    ],
)
def test_exit_code_gate(status: str, fail_on: str, code: int) -> None:
    assert exit_code(status, fail_on) == code


def _run(tmp_path: Path, reqs: list[dict[str, Any]], **kw: Any) -> Any:
    events = kw.pop("events", None)
    man = manifest(**kw)
    return make_verdict(load_run(write_run(tmp_path, man, reqs, events=events)))


def healthy(n: int = 30) -> list[dict[str, Any]]:
    return [
        request(i % 3, i // 3 + 1, float(i), ttft=1.0 + i / 100, cached=900, reusable=900)
        for i in range(n)
    ]


def test_healthy_run_passes_and_a_note_does_not_grade(tmp_path: Path) -> None:
    reqs = healthy()
    reqs[0]["reconnects"] = 1  # re-sent once on a fresh connection: a note, not a WARN
    v = _run(tmp_path, reqs, slo={"ttft_p95": 5.0})
    assert v.status == "PASS", v.findings
    assert v.slo[0].status == "MET" and v.slo[0].interval is not None


def test_zero_requests_fail(tmp_path: Path) -> None:
    v = _run(tmp_path, [])
    assert v.status == "FAIL" and "no_requests" in {f.code for f in v.findings}


def test_lost_records_fail(tmp_path: Path) -> None:
    d = write_run(tmp_path, manifest(), healthy())
    (d / "state.json").write_bytes(
        b'{"t": 30, "sent": 40, "recorded": 30, "in_flight_count": 0, "in_flight": [], '
        b'"finished": true}\n'
    )
    v = make_verdict(load_run(d))
    assert v.status == "FAIL" and "records_lost" in {f.code for f in v.findings}


def test_killed_run_is_a_warn_not_a_pass(tmp_path: Path) -> None:
    d = write_run(tmp_path, manifest(), healthy())
    kill(d, lived_s=40.0, sent=30, recorded=30)
    v = make_verdict(load_run(d))
    assert v.status == "WARN" and "incomplete" in {f.code for f in v.findings}


def test_crashed_user_and_hang_fail(tmp_path: Path) -> None:
    events = [event("user_crashed", 3.0, user=1), event("hang_suspected", 5.0)]
    v = _run(tmp_path, healthy(), events=events)
    assert v.status == "FAIL"
    assert {"users_crashed", "hangs"} <= {f.code for f in v.findings}


def test_a_record_stress_failed_to_write_warns_with_the_badges_words(tmp_path: Path) -> None:
    v = _run(tmp_path, healthy(), events=[event("record_failed", 3.0, user=1)])
    assert v.status == "WARN"
    assert [(f.code, f.short) for f in v.findings] == [("record_failed", "1 failed record")]


def test_slo_missed_by_19x_fails_and_by_1_1x_warns(tmp_path: Path) -> None:
    far = _run(tmp_path / "a", healthy(), slo={"ttft_p95": 0.066})
    near = _run(tmp_path / "b", healthy(), slo={"ttft_p95": 1.2})
    assert far.status == "FAIL" and far.slo[0].factor > 19
    assert near.status == "WARN" and 1 < near.slo[0].factor < 1.2
    assert "TTFT p95 MISSED x19" in far.summary and "TTFT p95 MISSED x1.0" in near.summary
