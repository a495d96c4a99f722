"""Token timing from tokens.bin: the log histogram's accuracy, the populations, old and
damaged runs, time-scaled runs, goodput on TTFT and ITL, the report and compare."""

from __future__ import annotations

from array import array
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from stress.analysis.analyze import analyze
from stress.analysis.itl import token_timing
from stress.analysis.loghist import LogHistogram
from stress.analysis.rundata import load_run
from stress.report.build import make_report
from stress.report.compare import compare, render_compare_md
from stress.report.summary import build_summary
from stress.store.token_times import FILE_NAME, MAGIC, encode_frame
from tests.report.synth import manifest, request, write_run


def frame(rid: str, ttft: float, gaps: list[float]) -> bytes:
    times = array("d", np.cumsum([100.0 + ttft, *gaps]).tolist())
    return encode_frame(rid, ttft, times)


def timed_run(
    root: Path,
    gaps_of: dict[str, list[float]],
    reqs: list[dict[str, Any]],
    **man: Any,
) -> Path:
    d = write_run(root, manifest(**man), reqs)
    data = MAGIC + b"".join(frame(rid, 0.5, g) for rid, g in gaps_of.items())
    (d / FILE_NAME).write_bytes(data)
    return d


def req(user: int, rnd: int, *, conv: int = 1000, **kw: Any) -> dict[str, Any]:
    r = request(user, rnd, float(rnd), conv=conv, **kw)
    r["request_id"] = f"n-u{user}-r{rnd}"
    return r


# --- the histogram --------------------------------------------------------------------


def test_log_histogram_percentiles_are_within_one_percent() -> None:
    rng = np.random.default_rng(7)
    values = rng.lognormal(np.log(0.03), 0.6, 200_000)
    h = LogHistogram()
    for part in np.array_split(values, 13):
        h.add(part)
    for q in (50, 90, 95, 99):
        exact = float(np.percentile(values, q, method="inverted_cdf"))
        assert h.percentile(q) == pytest.approx(exact, rel=0.01)
    assert h.n == values.size and h.mean == pytest.approx(values.mean(), rel=1e-9)
    assert h.sd == pytest.approx(values.std(ddof=1), rel=1e-6)
    assert (h.low, h.high) == (values.min(), values.max())
    assert h.counts.nbytes <= 8 * 1025  # bounded, whatever the number of values


def test_log_histogram_edges() -> None:
    h = LogHistogram()
    assert h.percentile(50) is None and h.mean is None and h.as_dict()["max"] is None
    h.add(np.array([0.0, 0.0, 0.0, np.nan, -1.0, np.inf]))  # chunks in one read; junk skipped
    assert h.n == 3 and h.percentile(50) == 0.0
    c = LogHistogram()
    c.add(np.full(1000, 0.02))
    assert c.percentile(50) == c.percentile(99) == 0.02  # clamped to the exact range
    c.add(np.array([5000.0]))  # beyond the last bin: counted there, the max stays exact
    assert c.high == 5000.0 and c.percentile(100) == 5000.0
    h.merge(c)
    assert h.n == 1004 and h.high == 5000.0


def test_sorted_percentile_is_numpys_bit_for_bit() -> None:
    from stress.analysis.figures import percentile_sorted

    rng = np.random.default_rng(11)
    for n in (1, 2, 3, 7, 16, 100, 999):
        for values in (rng.lognormal(-3.5, 0.8, n), rng.integers(0, 4, n) * 0.01):
            ordered = sorted(values.tolist())
            for q in (0, 1, 25, 50, 90, 95, 99, 100):
                assert percentile_sorted(ordered, q) == float(np.percentile(values, q))


def test_gaps_reach_the_histograms_in_batches_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batched (here every few gaps, and once at the end) or not, every gap counts once in
    each of its request's groups."""
    import stress.analysis.itl as itl

    rng = np.random.default_rng(3)
    reqs = [req(u, r, conv=900 + 700 * r) for u in range(3) for r in range(1, 6)]
    gaps = {
        x["request_id"]: rng.lognormal(-3.5, 0.5, 1 + r % 4).tolist() for r, x in enumerate(reqs)
    }
    d = timed_run(tmp_path, gaps, reqs)
    whole = token_timing(load_run(d))
    monkeypatch.setattr(itl, "BATCH_VALUES", 3)
    batched = token_timing(load_run(d))
    everything = np.concatenate([np.asarray(g) for g in gaps.values()])
    for a, b in [
        (whole.overall, batched.overall),
        *zip(whole.per_user.values(), batched.per_user.values(), strict=True),
        *((x.group, y.group) for x, y in zip(whole.by_length, batched.by_length, strict=True)),
    ]:
        assert (a.itl.n, a.itl.low, a.itl.high) == (b.itl.n, b.itl.low, b.itl.high)
        assert a.itl.counts.tolist() == b.itl.counts.tolist()
        assert a.itl.total == pytest.approx(b.itl.total, rel=1e-12)
    assert whole.overall.itl.n == everything.size
    assert whole.per_request == batched.per_request


# --- the analysis -----------------------------------------------------------------------


def test_populations_groups_and_per_request_figures(tmp_path: Path) -> None:
    reqs = [
        req(0, 1, warmup=True),  # warm-up: not in ITL
        req(0, 2, conv=800),
        req(0, 3, conv=4200),
        req(1, 2, conv=900, outcome="reasoning_only"),
        req(1, 3, outcome="error", error_class="stall"),  # failed: not in ITL
    ]
    gaps = {
        "n-u0-r1": [9.0] * 3,
        "n-u0-r2": [0.01, 0.02, 0.03],
        "n-u0-r3": [0.04] * 5,
        "n-u1-r2": [0.0, 0.02],  # two chunks in one read, then one 20 ms later
        "n-u1-r3": [0.5, 60.0],
        "n-u9-r9": [1.0],  # no such request: ignored
    }
    d = timed_run(tmp_path, gaps, reqs)
    t = token_timing(load_run(d))
    assert t.available and t.read.frames == 6 and t.read.damaged is None
    assert sorted(t.per_request) == ["n-u0-r2", "n-u0-r3", "n-u1-r2"]
    r2 = t.per_request["n-u0-r2"]
    assert (r2.chunks, r2.max) == (4, pytest.approx(0.03))
    assert r2.p50 == pytest.approx(0.02) and r2.p95 == pytest.approx(0.029, rel=1e-3)
    assert t.overall.itl.n == 3 + 5 + 2 and t.overall.itl.high == pytest.approx(0.04)
    assert t.overall.requests == 3 and t.per_user[0].itl.n == 8 and t.per_user[1].itl.n == 2
    assert t.overall.tpot == [pytest.approx(0.05)] * 3  # 1 / 20 tok/s (decode_tok_s)
    assert [(b.label, b.group.requests) for b in t.by_length] == [("0-1k", 2), ("4k-5k", 1)]
    assert t.goodput is None  # no slo.itl_p95


def test_a_run_without_tokens_bin_has_tpot_only(tmp_path: Path) -> None:
    d = write_run(tmp_path, manifest(), [req(0, 1), req(0, 2)])
    t = token_timing(load_run(d))
    assert not t.available and t.overall.itl.n == 0 and t.per_request == {}
    assert len(t.overall.tpot) == 2
    summary = build_summary(d)
    assert summary["token_timing"]["available"] is False
    assert summary["token_timing"]["tpot_s"]["n"] == 2
    assert summary["token_timing"]["itl_s"]["n"] == 0
    sections = {s.id: s for s in make_report(d, charts=False).sections}
    assert "no token timing" in sections["itl"].paragraphs[0]


def test_a_torn_tokens_bin_is_read_up_to_its_last_whole_frame(tmp_path: Path) -> None:
    d = timed_run(tmp_path, {"n-u0-r1": [0.02] * 4, "n-u0-r2": [0.03] * 4}, [req(0, 1), req(0, 2)])
    data = (d / FILE_NAME).read_bytes()
    (d / FILE_NAME).write_bytes(data[:-3])
    t = token_timing(load_run(d))
    assert list(t.per_request) == ["n-u0-r1"] and t.read.damaged == "torn last frame"
    md = {s.id: s for s in make_report(d, charts=False).sections}["itl"].paragraphs
    assert any("tokens.bin ends early (torn last frame" in p for p in md)


def test_a_time_scaled_run_is_on_the_simulated_clock(tmp_path: Path) -> None:
    reqs = [req(0, 1, decode=80.0)]  # wall tok/s, as recorded
    man = manifest()
    man["time_scale"] = 20.0
    d = write_run(tmp_path, man, reqs)
    (d / FILE_NAME).write_bytes(MAGIC + frame("n-u0-r1", 0.5, [0.0125] * 10))
    t = token_timing(load_run(d))
    assert t.per_request["n-u0-r1"].mean == pytest.approx(0.25)  # 12.5 ms wall x 20
    assert t.overall.itl.percentile(50) == pytest.approx(0.25, rel=0.01)
    assert t.overall.tpot == [pytest.approx(0.25)]  # 1 / (80 / 20)


def test_goodput_on_ttft_and_itl_together(tmp_path: Path) -> None:
    reqs = [
        req(0, 1, ttft=1.0),  # ITL p95 20 ms: good
        req(0, 2, ttft=3.0),  # TTFT over 2 s: not good
        req(1, 1, ttft=1.0),  # ITL p95 past 50 ms: not good
        req(1, 2, ttft=1.0, completion=1),  # one chunk, no gap: judged on TTFT alone
        req(1, 3, outcome="error", error_class="http_5xx"),  # not answered
    ]
    gaps = {
        "n-u0-r1": [0.02] * 20,
        "n-u0-r2": [0.02] * 20,
        "n-u1-r1": [0.02] * 18 + [0.3, 0.3],
        "n-u1-r2": [],
    }
    d = timed_run(tmp_path, gaps, reqs, slo={"ttft_p95": 2.0, "itl_p95": 0.05})
    a = analyze(d)
    t = a.tokens
    assert t.itl_limit == 0.05 and t.ttft_limit == 2.0
    assert t.goodput == pytest.approx(2 / 5)
    assert t.goodput_by_user == {0: 0.5, 1: pytest.approx(1 / 3)}
    summary = build_summary(d, a)["token_timing"]
    assert summary["goodput_ttft_itl"] == pytest.approx(0.4)
    assert summary["slo_itl_p95_s"] == 0.05
    section = {s.id: s for s in make_report(d, charts=False, analysis=a).sections}["itl"]
    assert any("Goodput on TTFT and ITL: 40.0% of turns" in p for p in section.paragraphs)
    assert [t.id for t in section.tables] == ["itl", "itl-by-length"]
    # compare shows the same figure, apart from the goodput on TTFT and decode speed
    c = compare([d, d])
    head = c.verdicts.columns
    row = c.verdicts.rows[0]
    assert row[head.index("goodput (TTFT + ITL)")] == "40.0%"
    assert "goodput (TTFT + ITL)" in render_compare_md(c)


def test_compare_shows_itl_and_judges_the_difference(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)

    def run(name: str, step: float) -> Path:
        reqs = [req(u, r) for u in range(4) for r in range(1, 9)]
        gaps = {x["request_id"]: list(rng.normal(step, step / 10, 30)) for x in reqs}
        m = manifest(name)
        m["scenario"]["request"]["max_tokens"] = 1000 if name == "slow" else 2000
        d = write_run(tmp_path, m, reqs)
        (d / FILE_NAME).write_bytes(MAGIC + b"".join(frame(k, 0.5, g) for k, g in gaps.items()))
        return d

    c = compare([run("fast", 0.02), run("slow", 0.04)])
    rows = {r[0]: r for r in c.figures.rows}
    itl = rows["ITL per request, mean (s)"]
    assert float(itl[1].split()[0]) == pytest.approx(0.02, rel=0.02)
    assert float(itl[2].split()[0]) == pytest.approx(0.04, rel=0.02)
    assert itl[-1] == "significant"
    assert rows["ITL p95, every gap (s)"][-1].startswith("too few runs")
    assert "ITL per request" in render_compare_md(c)


def test_summary_json_section_is_plain_json(tmp_path: Path) -> None:
    d = timed_run(tmp_path, {"n-u0-r1": [0.02] * 4}, [req(0, 1)])
    build_summary(d)
    tt = orjson.loads((d / "summary.json").read_bytes())["token_timing"]
    assert tt["itl_s"]["n"] == 4 and tt["itl_s"]["p50"] == pytest.approx(0.02)
    assert tt["per_user"]["0"]["itl_s"]["n"] == 4
    assert tt["by_length"][0]["label"] == "1k-1.5k"  # conversation of 1,000 tokens
    assert tt["tokens_file"] == {"frames": 1, "damaged": None, "skipped_bytes": 0}
