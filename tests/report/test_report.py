"""The report built from synthetic run directories with known values."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from stress.analysis.rundata import load_run
from stress.report.build import build_report, make_report, terminal_headline
from tests.report.synth import (
    gpu_records,
    manifest,
    request,
    server_records,
    write_run,
)


def _basic(tmp_path: Path, **kw: object) -> Path:
    reqs = [
        request(0, 1, 0.0, ttft=9.0, decode=1.0, warmup=True),
        request(1, 1, 1.0, ttft=9.0, decode=1.0, warmup=True),
        request(0, 2, 10.0, ttft=1.0, decode=10.0, e2e=4.0, conv=2000, cached=900, reusable=1000),
        request(1, 2, 11.0, ttft=2.0, decode=20.0, e2e=5.0, conv=2100, cached=1000, reusable=1000),
        request(0, 3, 20.0, ttft=3.0, decode=30.0, e2e=6.0, conv=3000, cached=2000, reusable=2000),
    ]
    return write_run(tmp_path, manifest(users=2, duration_s=40.0, pool=100_000.0), reqs, **kw)  # type: ignore[arg-type]


def _row(table_rows: list[list[str]], label: str) -> list[str]:
    return next(r for r in table_rows if r[0] == label)


def test_headline_excludes_warmup(tmp_path: Path) -> None:
    report = make_report(_basic(tmp_path), charts=False)
    ttft = _row(report.headline.rows, "TTFT (s)")
    assert ttft[1] == "2 ± 1" and ttft[2] == "2" and ttft[-1] == "3"
    decode = _row(report.headline.rows, "decode (tok/s)")
    assert decode[1] == "20 ± 10"
    agg = _row(report.headline.rows, "aggregate output (tok/s)")
    assert agg[1].startswith("6 ± ")  # 3 x 80 tokens / 40 s
    assert report.verdict.status == "PASS"
    assert "2 warm-up requests are excluded" in report.verdict.items[0]
    assert "not measured (no GPU telemetry" in " ".join(report.verdict.items)
    text = terminal_headline(report)
    assert text.startswith("PASS") and "TTFT (s)" in text


def test_verdict_lists_errors_empty_replies_and_hardware(tmp_path: Path) -> None:
    reqs = [
        request(0, 1, 0.0),
        request(0, 2, 10.0, outcome="error", error_class="http_5xx"),
        request(1, 1, 1.0, outcome="error", error_class="stall"),
        request(
            1,
            2,
            12.0,
            outcome="reasoning_only",
            finish="length",
            diagnosis="max_tokens reached before any text: raise request.max_tokens",
        ),
    ]
    events = [
        {"t": 5.0, "kind": "xid", "message": "Xid 79", "severity": "error", "source": "gpu"},
        {"t": 6.0, "kind": "hang_suspected", "message": "no progress", "severity": "error"},
    ]
    d = write_run(tmp_path, manifest(), reqs, events=events, gpu=gpu_records(20.0, 1))
    v = make_report(d, charts=False).verdict
    text = " ".join(v.items)
    assert v.status == "FAIL"
    assert "http_5xx 1" in text and "stall 1" in text
    assert "1 reasoning_only (max_tokens reached before any text" in text
    assert "suspected hangs 1" in text and "Stalls 1" in text
    assert "GPU hardware errors: xid 1" in text
    assert any("ran out of max_tokens" in w for w in v.warnings)


def test_killed_run_still_gets_a_report(tmp_path: Path) -> None:
    man = manifest(duration_s=None)
    d = write_run(tmp_path, man, [request(0, 1, 0.0), request(0, 2, 10.0)], torn_tail=True)
    assert len(load_run(d).requests) == 2
    report, md, html = build_report(d)
    assert report.verdict.status == "WARN"
    assert "did not finish" in " ".join(report.verdict.items)
    assert md.exists() and html.exists()


def test_files_charts_and_self_containment(tmp_path: Path) -> None:
    d = _basic(
        tmp_path,
        server=server_records(40.0, 100_000.0, 0.5, preempt_every=5),
        gpu=gpu_records(40.0, cards=2),
    )
    report, md, html = build_report(d)
    ids = [c.id for c in report.charts]
    assert ids == [
        "capacity",
        "ttft-over-time",
        "cache-kv-over-time",
        "preemptions-over-time",
        "retention-per-user",
        "gpu-over-time",
        "energy-per-token",
    ]
    page = html.read_text()
    for cid in ids:
        assert f'id="chart-{cid}"' in page
        assert (d / "report-charts" / f"{cid}.svg").exists()
    assert page.count("<svg") >= len(ids)
    # nothing to fetch: every src/href is in-page or a data: URI
    refs = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert all(r.startswith(("#", "data:")) for r in refs), refs
    assert "<script" not in page
    text = md.read_text()
    assert text.startswith("# stress report: synthetic")
    assert "## Verdict: PASS" in text and "## Fingerprint" in text
    assert "NVIDIA RTX 3090 [01:00.0] bus 0000:01:00.0 driver 570.86" in text
    assert "**TTFT**: first chunk carrying generated text" in text
    gpus = next(t for s in report.sections for t in s.tables if t.id == "gpus")
    assert gpus.rows[0][2] == "200" and gpus.rows[0][7] == "48.8%"
    # one name per card everywhere (model + short PCI address), throttle reasons carried
    assert gpus.rows[0][0] == "NVIDIA RTX 3090 [01:00.0]" and gpus.rows[0][0] in text
    assert gpus.rows[0][8] == "sw_power_cap 48.8%"
    assert gpus.rows[0][9] == "-"  # no collector summary in this run: unknown, not "no"
    # 2 cards x 200 W x 40 s = 16,000 J over 5 x 80 output tokens
    assert "40 J per output token" in gpus.note


def test_gpu_charts_absent_without_gpu_data(tmp_path: Path) -> None:
    report = make_report(_basic(tmp_path))
    ids = {c.id for c in report.charts}
    assert "gpu-over-time" not in ids and "energy-per-token" not in ids
    assert "ttft-over-time" in ids


def test_phase_table_for_sweeps(tmp_path: Path) -> None:
    reqs = [
        request(0, 1, 0.0, phase="ctx-15k", warmup=True, ttft=5.0),
        request(0, 2, 10.0, phase="ctx-15k", ttft=1.0),
        request(0, 3, 20.0, phase="ctx-60k", ttft=2.0),
    ]
    reqs[0]["phase"] = "ctx-15k"
    report = make_report(write_run(tmp_path, manifest(users=1), reqs), charts=False)
    phases = next(t for s in report.sections for t in s.tables if t.id == "phases")
    assert [r[0] for r in phases.rows] == ["ctx-15k (warm-up, excluded)", "ctx-15k", "ctx-60k"]
    assert _row(report.headline.rows, "TTFT (s)")[-1] == "2"


def test_not_a_run_dir(tmp_path: Path) -> None:
    from stress.core.errors import RunDirError

    with pytest.raises(RunDirError, match="not a run directory"):
        make_report(tmp_path)


def test_idle_card_flag_is_carried_from_the_run(tmp_path: Path) -> None:
    """The GPU collector flagged a card idle while the others worked: the report says so
    (it used to be visible only in the live view)."""
    d = _basic(tmp_path, gpu=gpu_records(40.0, cards=2))
    path = d / "manifest.json"
    man = orjson.loads(path.read_bytes())
    man["collectors"]["gpu"] = {
        "available": True,
        "cards": [
            {"key": "GPU-0000-0000", "flagged_idle": False, "idle_while_others_work_s": 0.0},
            {"key": "GPU-0000-0001", "flagged_idle": True, "idle_while_others_work_s": 31.5},
        ],
    }
    path.write_bytes(orjson.dumps(man))
    report = make_report(d, charts=False)
    gpus = next(t for s in report.sections for t in s.tables if t.id == "gpus")
    assert [r[-1] for r in gpus.rows] == ["no", "yes, 31.5 s"]
