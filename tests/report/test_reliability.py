"""The report never lies about a run: issue 12's report cases, through the real CLI.

Each test writes a run directory the way a real run leaves it (finished, killed with
``kill -9``, damaged) and runs ``stress report`` / ``stress ls`` as a user would, then
reads what they printed and wrote (stdout, report.md, summary.json).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from stress.cli.main import main
from tests.report.synth import event, kill, manifest, request, write_run


def report(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, dict[str, Any]]:
    """``stress report RUN_DIR``: what it printed, and the summary.json it wrote."""
    assert main(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out
    md = (run_dir / "report.md").read_text(encoding="utf-8")
    assert out.splitlines()[0].split(":")[0] in md  # the same verdict in both
    return out, orjson.loads((run_dir / "summary.json").read_bytes())


def codes(summary: dict[str, Any]) -> set[str]:
    return {w["code"] for w in summary["warnings"]}


def _ok(n: int, t0: float = 0.0) -> list[dict[str, Any]]:
    return [request(i % 2, i // 2 + 1, t0 + 4.0 * i, e2e=3.0) for i in range(n)]


def test_no_requests_is_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, s = report(write_run(tmp_path, manifest("nothing"), []), capsys)
    assert out.startswith("FAIL") and "NO REQUESTS FINISHED" in out
    assert "no_requests" in codes(s)


def test_only_warm_up_requests_is_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reqs = [request(0, 1, 0.0, warmup=True), request(1, 1, 1.0, warmup=True)]
    out, _ = report(write_run(tmp_path, manifest("warm"), reqs), capsys)
    assert out.startswith("FAIL") and "after warm-up (2 warm-up requests only)" in out


def test_crashed_users_are_fail_with_count_and_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = [
        event("user_crashed", 12.4, "user 1 stopped: ValueError: boom", user=1),
        event("user_crashed", 30.0, "user 3 stopped: ValueError: boom", user=3),
    ]
    d = write_run(tmp_path, manifest("crash", users=4), _ok(8), events=events)
    out, s = report(d, capsys)
    assert out.startswith("FAIL")
    assert "2 SIMULATED USERS CRASHED" in out and "user 1 at 12 s, user 3 at 30 s" in out
    assert "users_crashed" in codes(s)


def test_a_record_stress_failed_to_write_is_warn_and_a_missing_one_is_lost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    msg = "user 1 round 2: stress failed writing the request's record: TypeError: boom"
    ev = event("record_failed", 5.0, msg, user=1)
    out, s = report(write_run(tmp_path / "a", manifest("bug"), _ok(4), events=[ev]), capsys)
    assert out.startswith("WARN") and "record_failed" in codes(s)
    assert "STRESS FAILED RECORDING 1 REQUEST IN FULL (its record" in out and msg in out
    d = write_run(tmp_path / "b", manifest("bug"), _ok(4), events=[ev])
    state = {"t": 100.0, "sent": 5, "recorded": 4, "in_flight_count": 0, "finished": True}
    (d / "state.json").write_bytes(orjson.dumps(state))  # the record itself is missing
    out, s = report(d, capsys)
    assert out.startswith("FAIL") and {"record_failed", "records_lost"} <= codes(s)


def test_recorder_failure_is_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    man = manifest("disk")
    man["exit_reason"] = "recorder_failed"
    ev = event("recorder_failed", 5.0, "cannot write requests.jsonl: No space left on device")
    out, s = report(write_run(tmp_path, man, _ok(4), events=[ev]), capsys)
    assert out.startswith("FAIL") and "THE RECORDER FAILED (cannot write" in out
    assert "recorder_failed" in codes(s)


def test_dead_collector_is_at_least_warn_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = [
        event("collector_failed", 3.0, "collector server stopped", collector="server"),
        event("gpu_collector_failed", 4.0, "GPU telemetry stopped", source="gpu"),
    ]
    out, _ = report(write_run(tmp_path, manifest("col"), _ok(4), events=events), capsys)
    assert out.startswith("WARN")
    assert "collector failed: gpu (GPU telemetry stopped); server (collector server" in out


def test_killed_run_counts_requests_in_flight_and_lived_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 10 requests finished by 64 s; the run lived 80 s and had 12 sent when killed; the
    # last line was torn by the kill.
    d = write_run(tmp_path, manifest("killed"), _ok(9, t0=30.0), torn_tail=True)
    kill(d, lived_s=80.0, sent=12, recorded=10)
    out, s = report(d, capsys)
    assert out.startswith("WARN")
    assert (
        "12 sent, 10 recorded (1 of them unreadable), 2 in flight with no record "
        "(the run was killed)" in out
    )
    assert "did not finish (killed or crashed) after 80 s" in out
    assert "1 line of requests.jsonl could not be read" in out
    assert s["duration_s"] == 80.0
    assert s["accounting"] == {
        "sent": 12,
        "recorded": 9,
        "unreadable_lines": 1,
        "no_record": 2,
        "killed": True,
        "lost_to_disk": 0,
        "write_error": None,
    }
    assert s["data_quality"]["unreadable_lines"] == {"requests.jsonl": 1}
    assert {"in_flight_lost", "unreadable_lines"} <= codes(s)
    assert main(["ls", str(tmp_path)]) == 0
    assert "1.3m" in capsys.readouterr().out  # 80 s, not the last request's 64 s


def test_finished_run_with_missing_records_is_fail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = write_run(tmp_path, manifest("lost"), _ok(3))
    state = {"t": 100.0, "sent": 5, "recorded": 5, "in_flight_count": 0, "finished": True}
    (d / "state.json").write_bytes(orjson.dumps(state))
    out, _ = report(d, capsys)
    assert out.startswith("FAIL") and "RECORDS LOST: 2 of 5 requests" in out
    assert "5 sent, 3 recorded, 2 with no record (lost)" in out


def test_impossible_values_are_excluded_and_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = request(0, 2, 10.0, decode=-138.0, completion=-5, prompt=1000, cached=10_000)
    bad["chunks_content"] = 3
    reqs = [request(0, 1, 0.0, decode=20.0, cached=500, prompt=1000), bad]
    out, s = report(write_run(tmp_path, manifest("neg"), reqs), capsys)
    o = s["overall"]
    assert o["decode_tok_s"]["n"] == 1 and o["decode_tok_s"]["min"] == 20.0
    assert o["cached_share"] == 0.5 and o["completion_tokens"] == 80
    assert s["data_quality"]["excluded_values"] == {
        "cached_tokens > prompt_tokens": 1,
        "completion_tokens negative": 1,
        "decode_tok_s negative": 1,
    }
    assert s["data_quality"]["requests_with_excluded_values"] == 1
    assert "IMPOSSIBLE VALUES: 3 values in 1 request excluded from every figure" in out
    assert "-138" not in out and "1000 %" not in out
    assert "3 impossible values excluded" in (tmp_path / "run-neg" / "report.md").read_text()


def test_stalls_and_longest_silence_are_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reqs = _ok(4)
    for i, r in enumerate(reqs):
        r["max_gap_s"] = 0.1 * (i + 1)
    stall = request(1, 9, 40.0, outcome="error", error_class="stall", e2e=230.0)
    stall["max_gap_s"] = 200.0
    ftt = request(0, 9, 41.0, outcome="error", error_class="first_token_timeout")
    out, s = report(write_run(tmp_path, manifest("stall"), [*reqs, stall, ftt]), capsys)
    assert "Stalls 1, first-token timeouts 1" in out
    assert "Longest silence inside each stream (max_gap_s): p50 0.3 s" in out
    assert "max 200 s (n = 5)" in out and "longest silence (s)" in out
    assert s["stalls"]["stall"] == 1 and s["stalls"]["first_token_timeout"] == 1
    assert s["stalls"]["max_gap_s"]["max"] == 200.0 and s["stalls"]["max_gap_s"]["n"] == 5
    assert s["overall"]["max_gap_s"]["p95"] is not None


def test_reasoning_only_stop_is_not_answered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reqs = [*_ok(2), request(1, 5, 20.0, outcome="reasoning_only", finish="stop")]
    out, s = report(write_run(tmp_path, manifest("think"), reqs), capsys)
    assert "2 of 3 requests answered" in out
    assert s["overall"]["answered"] == 2
    assert "reasoning_no_answer" in codes(s)


def test_new_error_classes_are_explained(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reqs = [
        *_ok(2),
        *(
            request(0, 3 + i, 20.0 + i, outcome="error", error_class=c)
            for i, c in enumerate(("redirect", "protocol", "client_error"))
        ),
    ]
    out, _ = report(write_run(tmp_path, manifest("classes"), reqs), capsys)
    assert "redirect 1: the server answered with a redirect, never followed" in out
    assert "protocol 1: not a chat-completion reply" in out
    assert "client_error 1: a failure inside stress itself" in out


def test_damaged_fields_are_counted_not_fatal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reqs = _ok(4)
    reqs[0]["user"] = "abc"
    reqs[1]["t_start"] = "soon"
    reqs[2]["outcome"] = ["ok"]
    reqs[3]["prompt_tokens"] = 2**64 - 1
    d = write_run(
        tmp_path,
        manifest("fields"),
        reqs,
        events=[{"kind": ["x"], "t": 1.0}, event("restart", "late")],  # type: ignore[arg-type]
        server=[{"t": 1.0, "deltas": [1], "values": {"kv_usage": "high"}}, {"t": "x"}],
        gpu=[{"t": 0.0, "type": "cards", "cards": ["x"]}, {"type": "sample", "cards": 3}],
    )
    out, s = report(d, capsys)
    assert "2 lines of events.jsonl" not in out  # the event without a time still counts
    assert "1 line of events.jsonl, 1 line of server.jsonl and 1 line of gpu.jsonl" in out
    assert s["data_quality"]["unreadable_lines"] == {
        "events.jsonl": 1,
        "server.jsonl": 1,
        "gpu.jsonl": 1,
    }
    assert s["data_quality"]["excluded_values"] == {
        "outcome unknown": 1,
        "prompt_tokens impossibly large": 1,
        "t_start not a number": 1,
        "user not a number": 1,
    }


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda d: (d / "manifest.json").write_bytes(b'{"run_id": "x", "scenar'), "not JSON"),
        (
            lambda d: (d / "manifest.json").write_bytes(b'{"scenario": "x"}'),
            "scenario is str 'x', expected an object",
        ),
        (
            lambda d: (d / "manifest.json").write_bytes(b'{"duration_s": "long"}'),
            "duration_s is str 'long', expected a number",
        ),
        (
            lambda d: (d / "manifest.json").write_bytes(b'{"time_scale": 0}'),
            "time_scale is 0, expected a number > 0",
        ),
        (
            lambda d: ((d / "requests.jsonl").unlink(), (d / "requests.jsonl").mkdir()),
            "cannot read",
        ),
    ],
)
def test_damaged_run_report_is_one_line_exit_1_and_ls_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: Any, why: str
) -> None:
    write_run(tmp_path, manifest("good"), _ok(2))
    bad = write_run(tmp_path, manifest("bad"), _ok(2))
    damage(bad)
    assert main(["report", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("stress: ") and why in err
    assert str(bad) in err
    assert main(["ls", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "run-good" in out and f"{bad}  damaged: " in out and why in out
