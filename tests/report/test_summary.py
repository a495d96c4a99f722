"""summary.json from synthetic run directories: statistics and the loud warnings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from stress.core.errors import RunDirError
from stress.report.summary import build_summary, render_summary

BASE: dict[str, Any] = {
    "user": 0,
    "conversation": 1,
    "round": 1,
    "turn": 1,
    "warmup": False,
    "t_start": 0.0,
    "http_status": 200,
    "outcome": "ok",
    "error_class": None,
    "chunks_content": 10,
    "chunks_reasoning": 0,
    "finish_reason": "stop",
    "ttft_s": 1.0,
    "ttfc_s": 1.0,
    "e2e_s": 2.0,
    "decode_tok_s": 10.0,
    "queue_s": 0.0,
    "prompt_tokens": 100,
    "cached_tokens": 50,
    "reusable_tokens": 60,
    "completion_tokens": 10,
    "reconnects": 0,
}


def run_dir(tmp_path: Path, records: list[dict[str, Any]], cache: str = "per_user") -> Path:
    d = tmp_path / "run"
    d.mkdir()
    manifest = {
        "run_id": "r",
        "scenario": {"name": "s", "conversation": {"cache": cache}},
        "duration_s": 10.0,
        "end_time": 1.0,
        "exit_reason": "duration",
    }
    (d / "manifest.json").write_bytes(orjson.dumps(manifest))
    (d / "requests.jsonl").write_bytes(b"\n".join(orjson.dumps({**BASE, **r}) for r in records))
    return d


def codes(summary: dict[str, Any]) -> set[str]:
    return {w["code"] for w in summary["warnings"]}


def test_statistics_exclude_warmup(tmp_path: Path) -> None:
    recs = [{"ttft_s": float(i), "round": i} for i in range(1, 11)]
    recs.append({"ttft_s": 100.0, "warmup": True})
    s = build_summary(run_dir(tmp_path, recs))
    t = s["overall"]["ttft_s"]
    assert t["n"] == 10 and t["mean"] == pytest.approx(5.5) and t["p50"] == pytest.approx(5.5)
    assert t["sd"] == pytest.approx(3.0277, rel=1e-3) and t["max"] == 10.0
    assert s["warmup_requests"] == 1 and s["requests_total"] == 11
    assert s["overall"]["cached_share"] == pytest.approx(0.5)
    assert s["overall"]["cache_retention"] == pytest.approx(50 / 60)
    assert s["overall"]["output_tok_s"] == pytest.approx(10.0)
    assert (tmp_path / "run" / "summary.json").exists()
    assert "TTFT s" in render_summary(s)


def test_measuring_noise_when_no_chunk_carried_text(tmp_path: Path) -> None:
    s = build_summary(run_dir(tmp_path, [{"chunks_content": 0, "outcome": "empty"}] * 3))
    assert "measuring_noise" in codes(s)
    assert any("MEASURING NOISE" in w["message"] for w in s["warnings"])


def test_reasoning_budget_warning(tmp_path: Path) -> None:
    rec = {
        "outcome": "reasoning_only",
        "finish_reason": "length",
        "chunks_content": 0,
        "chunks_reasoning": 300,
    }
    s = build_summary(run_dir(tmp_path, [rec] * 4))
    assert "all_replies_budget" in codes(s)
    msg = next(w["message"] for w in s["warnings"] if w["code"] == "all_replies_budget")
    assert "max_tokens" in msg and "1,500-2,000" in msg


def test_some_empty_replies_are_flagged_not_successes(tmp_path: Path) -> None:
    s = build_summary(run_dir(tmp_path, [{}, {}, {"outcome": "empty", "chunks_content": 0}]))
    assert "empty_replies" in codes(s) and s["overall"]["outcomes"]["empty"] == 1


def test_zero_hit_rate_on_follow_ups(tmp_path: Path) -> None:
    recs = [{"turn": 2, "cached_tokens": 0}, {"turn": 3, "cached_tokens": 0}]
    assert "zero_hit_rate" in codes(build_summary(run_dir(tmp_path, recs)))


def test_cached_tokens_not_reported(tmp_path: Path) -> None:
    recs = [{"turn": 2, "cached_tokens": None}]
    assert "cache_unreported" in codes(build_summary(run_dir(tmp_path, recs)))


def test_cold_mode_does_not_warn_about_zero_hits(tmp_path: Path) -> None:
    recs = [{"turn": 2, "cached_tokens": 0}]
    assert "zero_hit_rate" not in codes(build_summary(run_dir(tmp_path, recs, cache="cold")))


def test_torn_last_line_is_skipped_and_counted(tmp_path: Path) -> None:
    d = run_dir(tmp_path, [{}, {}])
    with open(d / "requests.jsonl", "ab") as f:
        f.write(b'\n{"user": 0, "outc')
    s = build_summary(d)
    assert s["requests_total"] == 2
    assert s["data_quality"]["unreadable_lines"] == {"requests.jsonl": 1}
    assert "unreadable_lines" in codes(s)
    assert "1 line of requests.jsonl could not be read" in render_summary(s)


def test_killed_run_summary_states_requests_in_flight(tmp_path: Path) -> None:
    d = run_dir(tmp_path, [{"t_start": 50.0, "e2e_s": 14.0}] * 3)
    manifest = orjson.loads((d / "manifest.json").read_bytes())
    manifest.update(end_time=None, duration_s=None, exit_reason=None)
    (d / "manifest.json").write_bytes(orjson.dumps(manifest))
    state = {"t": 80.0, "sent": 5, "recorded": 3, "in_flight_count": 2, "finished": False}
    (d / "state.json").write_bytes(orjson.dumps(state))
    s = build_summary(d)
    assert s["duration_s"] == 80.0 and s["overall"]["output_tok_s"] == pytest.approx(30 / 80)
    text = render_summary(s)
    assert "requests: 5 sent, 3 recorded, 2 in flight with no record (the run was killed)" in text
    assert "in_flight_lost" in codes(s)


def test_unwritable_run_dir_is_a_run_dir_error(tmp_path: Path) -> None:
    d = run_dir(tmp_path, [{}])
    (d / "summary.json").mkdir()  # os.replace onto a folder fails like a read-only disk
    with pytest.raises(RunDirError, match=r"cannot write .*summary\.json"):
        build_summary(d)


def test_not_a_run_dir(tmp_path: Path) -> None:
    with pytest.raises(RunDirError):
        build_summary(tmp_path)


def test_repeated_phases_are_pooled_over_passes(tmp_path: Path) -> None:
    recs = []
    for n, ttft in ((1, 1.0), (2, 3.0)):  # pass medians 1.0 and 3.0
        for i in range(3):
            recs.append(
                {"phase": f"users-3#{n}", "ttft_s": ttft, "t_start": 10.0 * n + i, "e2e_s": 1.0}
            )
        recs.append({"phase": f"users-3#{n}", "ttft_s": 99.0, "warmup": True})
    recs.append({"phase": "single#1", "ttft_s": 5.0})
    s = build_summary(run_dir(tmp_path, recs))
    step = s["phase_steps"]["users-3"]
    assert step["passes"] == 2
    assert step["ttft_p50_s"]["mean"] == pytest.approx(2.0)
    assert step["ttft_p50_s"]["sd"] == pytest.approx(1.4142, rel=1e-3)
    assert "single" not in s["phase_steps"]  # one pass: nothing to pool
    assert "users-3: 2 passes" in render_summary(s)
