"""The one judge: health rules on counts, SLO grades with their factor, the exit-code gate.

Each case is a defect of issue 13: an SLO miss was only WARN whatever its size, a run with
0 requests, lost records or crashed users read PASS, the exit code ignored the verdict, and
every run read WARN (a note such as a re-sent pooled connection graded the run).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from stress.analysis.checks import accounting_text
from stress.analysis.judge import (
    Finding,
    HealthCounts,
    SloCheck,
    grade,
    health_findings,
    make_verdict,
    tally,
)
from stress.analysis.rundata import load_run
from stress.core.limits import EXIT_VERDICT_FAIL, MIN_SAMPLES, exit_code
from stress.tui.verdict import judge
from tests.report.synth import event, kill, manifest, request, write_run
from tests.tui.data import snapshot


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
    few = health_findings(HealthCounts(1000, 990, errors=10, error_rate_limit=0.01))
    many = health_findings(HealthCounts(1000, 989, errors=11, error_rate_limit=0.01))
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


def test_a_run_that_answered_nothing_fails_whatever_else_it_shows() -> None:
    """All cancelled, all empty, all failed within the budget's words: 0 answered is FAIL;
    no request at all is the ``no_requests`` check's, not this rule's."""
    for counts in (
        HealthCounts(requests=12, cancelled_by_user=12),
        HealthCounts(requests=5, odd_replies=5),
        HealthCounts(requests=1, errors=1, error_rate_limit=1.0),
    ):
        found = health_findings(counts)
        assert grade(found) == "FAIL" and found[0] == Finding(
            "FAIL", "none_answered", f"0 of {counts.requests} answered"
        )
    assert health_findings(HealthCounts()) == []


def test_cancelled_at_the_drain_deadline_are_graded_on_the_error_budget_apart() -> None:
    few = health_findings(HealthCounts(1000, 990, errors=5, cancelled=5))
    many = health_findings(HealthCounts(1000, 984, errors=5, cancelled=11))
    assert [(f.level, f.short) for f in few] == [
        ("WARN", "5 errors (0.5%)"),
        ("WARN", "5 cancelled at drain (0.5%)"),
    ]
    assert [(f.level, f.short) for f in many] == [
        ("FAIL", "11 cancelled at drain (1.1%)"),
        ("WARN", "5 errors (0.5%)"),
    ]


def test_requests_the_user_cut_short_warn_and_never_fail() -> None:
    found = health_findings(HealthCounts(10, 2, cancelled_by_user=8))
    assert [(f.level, f.code, f.short) for f in found] == [
        ("WARN", "cancelled_by_user", "8 cut by Ctrl-C")
    ]


def cancelled(i: int, cause: str | None) -> dict[str, Any]:
    r = request(i % 2, i // 2 + 1, float(i), outcome="error", error_class="cancelled")
    return {**r, "cancelled_by": cause}


def test_tally_counts_errors_and_cancellations_apart_by_cause() -> None:
    recs: list[Any] = [*healthy(3), cancelled(3, "drain_deadline"), cancelled(4, "interrupt")]
    recs += [cancelled(5, "interrupt_drain"), cancelled(6, None)]
    recs.append(request(0, 9, 9.0, outcome="error", error_class="http_5xx"))
    recs.append(request(1, 9, 9.0, outcome="reasoning_only"))  # generated, not answered
    t = tally(recs)
    assert (t.requests, t.answered, t.error_count) == (9, 3, 1)
    assert t.cancelled == {
        "drain_deadline": 1,
        "interrupt": 1,
        "interrupt_drain": 1,
        "unrecorded": 1,
    }
    assert (t.by_user, t.charged) == (2, 2)  # a cause not recorded is charged to the run


def test_every_request_cancelled_at_the_drain_deadline_is_a_fail_in_agreeing_words(
    tmp_path: Path,
) -> None:
    """The headline's "0 errors" and the list's "Errors: none." agree; the cancellations
    are counted once, apart, with their cause."""
    v = _run(tmp_path, [cancelled(i, "drain_deadline") for i in range(4)])
    assert v.status == "FAIL"
    assert v.summary == "FAIL: 0 of 4 requests answered, 0 errors, 4 cancelled, 0 hangs, 0 restarts"
    assert v.items[0].startswith("Requests: 4 recorded (cancelled 4);"), v.items[0]
    assert "Errors: none." in v.items
    text = v.as_dict()["cancelled"]
    assert text.startswith("4 (4 at the drain deadline: still running timeouts.drain after")
    assert "the run fails past 1% of requests cancelled at the drain deadline" in text
    assert f"Cancelled: {text}." in v.items
    assert [(f.level, f.code) for f in v.findings][:2] == [
        ("FAIL", "none_answered"),
        ("FAIL", "cancelled"),
    ]
    assert v.as_dict()["counts"] == {
        "requests": 4,
        "answered": 0,
        "errors": 0,
        "cancelled": 4,
        "cancelled_by": {"drain_deadline": 4},
    }


def test_errors_beside_cancellations_read_the_same_in_headline_and_list(tmp_path: Path) -> None:
    reqs = healthy(30)
    reqs[0] = request(0, 1, 0.0, outcome="error", error_class="http_5xx")
    reqs[1] = cancelled(1, "interrupt")
    v = _run(tmp_path, reqs)
    assert ", 1 errors, 1 cancelled," in v.summary
    errors = next(i for i in v.items if i.startswith("Errors:"))
    assert errors.startswith("Errors: 1 (http_5xx 1);"), errors
    assert "(cancelled 1, error 1, ok 28)" in v.items[0]
    assert v.status == "FAIL" and "errors" in {f.code for f in v.findings}  # 1 of 30


def test_a_run_the_user_cut_short_after_answers_is_a_warn(tmp_path: Path) -> None:
    reqs = [*healthy(30), cancelled(30, "interrupt"), cancelled(31, "interrupt_drain")]
    v = _run(tmp_path, reqs)
    assert v.status == "WARN", v.findings
    assert [(f.code, f.short) for f in v.findings] == [("cancelled_by_user", "2 cut by Ctrl-C")]
    assert "those the user cut short fail nothing" in str(v.as_dict()["cancelled"])


def test_records_lost_to_a_full_disk_are_said_so_not_a_kill(tmp_path: Path) -> None:
    """state.json's last count after a write failure: sent, recorded, lost to the disk;
    the manifest kept its first version (no end time), the run was not killed."""
    d = write_run(tmp_path, manifest(), healthy(7))
    man = orjson.loads((d / "manifest.json").read_bytes())
    man.update(end_time=None, duration_s=None, exit_reason=None)
    (d / "manifest.json").write_bytes(orjson.dumps(man))
    (d / "state.json").write_bytes(
        b'{"t": 30, "sent": 12, "recorded": 7, "in_flight_count": 0, "in_flight": [], '
        b'"finished": true, "unwritten": 5, "write_error": "No space left on device"}\n'
    )
    run = load_run(d)
    v = make_verdict(run)
    assert run.complete and not run.accounting.killed
    acct = run.accounting.as_dict()
    assert accounting_text(acct) == (
        "12 sent, 7 recorded, 5 lost to the disk (No space left on device)"
    )
    assert v.items[0].startswith("Requests: 12 sent, 7 recorded, 5 lost to the disk")
    assert not any("did not finish" in i for i in v.items)
    codes = {f.code for f in v.findings}
    assert v.status == "FAIL" and {"records_lost", "recorder_failed"} <= codes
    assert "incomplete" not in codes and "in_flight_lost" not in codes
    assert any(w.startswith("RECORDS LOST TO THE DISK: 5 of 12") for w in v.warnings)


def test_a_kill_after_a_write_failure_is_still_a_kill(tmp_path: Path) -> None:
    d = write_run(tmp_path, manifest(), healthy(7))
    kill(d, lived_s=30.0, sent=9, recorded=7)
    state = orjson.loads((d / "state.json").read_bytes())
    state.update(unwritten=2, write_error="No space left on device")
    (d / "state.json").write_bytes(orjson.dumps(state))
    acct = load_run(d).accounting.as_dict()
    assert acct["killed"] is True and acct["lost_to_disk"] == 0
    assert (
        accounting_text(acct)
        == "9 sent, 7 recorded, 2 in flight with no record (the run was killed)"
    )


def test_the_live_badge_reads_the_same_rules() -> None:
    """Every request cancelled with no drain deadline seen is the user's (a second
    Ctrl-C); with one seen, the run's own: both fail a run that answered nothing."""
    snap = replace(
        snapshot(gpus=False),
        outcomes={"ok": 0, "error": 3, "empty": 0, "reasoning_only": 0, "truncated": 0},
        error_classes={"cancelled": 3},
        collectors={"server": {"restarts": 0, "up": True, "preemptions": 0}},
    )
    by_user = judge(snap, Counter(), 0, 0)
    assert by_user.level == "bad" and by_user.reasons == ("0 of 3 answered", "3 cut by Ctrl-C")
    at_drain = judge(snap, Counter({"drain_timeout": 1}), 0, 0)
    assert at_drain.reasons == ("0 of 3 answered", "3 cancelled at drain (100.0%)")
