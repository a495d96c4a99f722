"""One place per figure (issue 13, item 2): summary.json, the report, ``stress ls`` and the
live view show the same TTFT p95, cache retention, output tokens, J/token and KV pool.

Each ``test_*_disagreement`` test failed before ``stress.analysis.figures`` existed; the last one
builds a real simulator run and reads the figures from every output."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson
import pytest

from stress.analysis import figures
from stress.analysis.analyze import analyze
from stress.core.fmt import times
from stress.core.record import RequestRecord
from stress.live.state import Live, Snapshot
from stress.report.archive import row_for
from stress.report.build import make_report
from stress.report.capacity import capacity_section
from stress.report.compare import compare
from stress.report.model import Report, Table
from stress.report.summary import build_summary
from stress.tui.verdict import judge
from tests.report.synth import gpu_records, manifest, request, write_run

ROOT = Path(__file__).resolve().parents[2]


def _table(report: Report, table_id: str) -> Table:
    for s in report.sections:
        for t in s.tables:
            if t.id == table_id:
                return t
    raise AssertionError(f"no table {table_id}")


# ---- the functions ---------------------------------------------------------------------


def test_ttft_p95_counts_only_requests_that_generated_text() -> None:
    recs = [request(0, i, float(i), ttft=float(i)) for i in range(1, 21)]
    failed = request(0, 99, 99.0, outcome="error", error_class="stall")
    failed["ttft_s"] = 500.0  # failed after its first token: has a TTFT, is not counted
    warm = request(1, 1, 0.0, ttft=900.0, warmup=True)
    assert figures.ttft_p95([*recs, failed, warm]) == pytest.approx(19.05)
    assert figures.ttft_p95([failed, warm]) is None


def test_retention_is_clamped_and_skips_unknown() -> None:
    recs = [
        request(
            0, 2, 0.0, conv=2000, cached=1100, reusable=1000
        ),  # block alignment: more than reusable
        request(0, 3, 1.0, cached=500, reusable=1000),
        request(0, 1, 2.0, cached=0, reusable=0),  # first turn: nothing to reuse
        request(0, 4, 3.0, cached=None, reusable=1000),  # unknown: not counted
    ]
    assert figures.cache_retention(recs) == pytest.approx(1500 / 2000)
    assert figures.retention([(1100, 1000)]) == 1.0
    assert figures.retention([(5, 0)]) is None


def test_energy_prefers_the_collector_and_counts_server_cards_only() -> None:
    samples = [r for r in gpu_records(10.0, cards=2) if r["type"] == "sample"]
    k0 = samples[0]["cards"][0]["key"]
    assert figures.energy_j(None, samples, [k0]) == pytest.approx(2000.0)
    assert figures.energy_j(None, samples, None) == pytest.approx(4000.0)
    assert figures.energy_j({"energy_j": 1234.5}, samples, [k0]) == 1234.5
    assert figures.energy_j(None, [], None) is None
    assert figures.j_per_token(2000.0, 100) == 20.0
    assert figures.j_per_token(2000.0, 0) is None


def test_kv_pool_sources_in_order() -> None:
    sample = {"t": 1.0, "values": {"kv_pool_tokens": 1000.0}}
    assert figures.kv_pool_tokens([sample], {"kv_pool_tokens": 2}, {"kv_pool_tokens": 3}) == 1000
    assert figures.kv_pool_tokens([], {"kv_pool_tokens": None}, {"kv_pool_tokens": 3}) == 3
    assert figures.kv_pool_tokens([], None, None) is None


def test_distribution_is_numpys_and_empty_is_all_none() -> None:
    import numpy as np

    v = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]
    d = figures.distribution(v)
    assert list(d) == ["n", "mean", "sd", "p50", "p95", "p99", "min", "max"]
    assert d["n"] == 8 and d["mean"] == float(np.mean(v)) and d["min"] == 1.0
    assert d["sd"] == float(np.std(v, ddof=1))
    assert d["p95"] == float(np.percentile(v, 95))
    assert figures.distribution([7.0])["sd"] == 0.0
    empty = figures.distribution([])
    assert empty["n"] == 0 and all(empty[k] is None for k in empty if k != "n")


def test_median_is_numpys_median_not_the_50th_percentile() -> None:
    import numpy as np

    v = [0.1, 0.7, 0.2, 0.30000000000000004]
    assert figures.median(v) == float(np.median(v))
    assert figures.median([]) is None


def test_output_tok_s_over_the_requests_given_and_a_positive_span() -> None:
    recs = [
        request(0, 1, 0.0, completion=100, prompt=1000),
        request(0, 2, 1.0, completion=50, prompt=2000),
        request(1, 1, 0.0, completion=30, prompt=500, warmup=True),
    ]
    recs[1]["prompt_tokens"] = None  # unknown counts as 0
    assert figures.output_tok_s(recs, 10.0) == 18.0  # callers choose the population
    assert figures.output_tok_s(figures.main_requests(recs), 10.0) == 15.0
    assert figures.output_tok_s(recs, 0.0) is None and figures.output_tok_s(recs, None) is None
    assert figures.output_tokens(recs) == 150 and figures.completion_tokens(recs) == 180
    assert figures.prompt_tokens(recs) == 1500


# ---- the disagreements of issue 13, each failed before -----------------------------------


def test_ttft_p95_disagreement(tmp_path: Path) -> None:
    """The verdict's SLO check took failed requests' TTFT too (191 s vs 188 s)."""
    reqs = [request(i % 2, i, float(i), ttft=float(i)) for i in range(1, 21)]
    for i in range(3):
        failed = request(0, 30 + i, 30.0 + i, outcome="error", error_class="stall")
        failed["ttft_s"] = 100.0
        reqs.append(failed)
    man = manifest(duration_s=60.0, slo={"ttft_p95": 10.0, "decode_tok_s_p50": 0.0})
    d = write_run(tmp_path, man, reqs)
    summary = build_summary(d)
    report = make_report(d, charts=False)
    p95 = summary["overall"]["ttft_s"]["p95"]
    assert p95 == pytest.approx(19.05)
    headline = next(r for r in report.headline.rows if r[0].startswith("TTFT"))
    assert headline[3] == "19.1"
    check = report.verdict.slo[0]
    assert check.value == p95 and check.status == "MISSED"
    assert any(i.startswith(f"SLO: TTFT p95 {p95:.3g} s [") for i in report.verdict.items)
    assert row_for(d).ttft_p95_s == p95


def test_energy_per_token_disagreement(tmp_path: Path) -> None:
    """summary.json counted the server's cards, the report every card."""
    gpu = gpu_records(40.0, cards=2)
    k0 = gpu[0]["cards"][0]["key"]
    gpu[0]["server_cards"] = [k0]  # the server runs on one card of two
    reqs = [request(0, i, 5.0 * i, completion=100) for i in range(1, 5)]
    man = manifest(duration_s=40.0)
    d = write_run(tmp_path, man, reqs, gpu=gpu)
    # a run killed before the collector's summary: energy from the samples, server card only
    summary = build_summary(d)
    assert summary["gpu"]["j_per_token"] == pytest.approx(8000.0 / 400)
    note = _table(make_report(d, charts=False), "gpus").note
    assert "20 J per output token (400 tokens)" in note
    assert "on the server's 1 of 2 cards" in note
    # with the collector's own figure (guarded accumulator), both use it
    man["collectors"]["gpu"] = {
        "available": True,
        "server_cards": [k0],
        "energy_j": 7000.0,
        "tokens": 400,
        "j_per_token": 17.5,
    }
    (d / "manifest.json").write_bytes(orjson.dumps(man))
    summary = build_summary(d)
    assert summary["gpu"]["j_per_token"] == pytest.approx(17.5)
    assert "17.5 J per output token" in _table(make_report(d, charts=False), "gpus").note


def test_retention_disagreement(tmp_path: Path) -> None:
    """The live view divided unclamped (110 %); summary and report clamp."""
    live = Live(1)
    rec = RequestRecord(
        user=0, conversation=1, round=2, turn=2, phase="main", t_sched=0.0, t_start=0.0
    )
    rec.outcome, rec.prompt_tokens, rec.cached_tokens, rec.reusable_tokens = "ok", 1200, 1100, 1000
    live.on_send(rec)
    live.on_record(rec, 1.0)
    snap = live.snapshot(1.0)
    assert snap.users[0].last_retention == 1.0
    assert snap.cache_retention == 1.0
    reqs = [
        request(0, 2, 0.0, conv=2000, cached=1100, reusable=1000),
        request(0, 3, 5.0, conv=2000, cached=200, reusable=1000),
    ]
    d = write_run(tmp_path, manifest(users=1, duration_s=20.0), reqs)
    summary = build_summary(d)
    assert summary["overall"]["cache_retention"] == pytest.approx(0.6)
    assert summary["per_user"]["0"]["cache_retention"] == pytest.approx(0.6)
    per_user = _table(make_report(d, charts=False), "per-user")
    assert per_user.rows[0][per_user.columns.index("retention")] == "60.0%"


def test_kv_pool_disagreement(tmp_path: Path) -> None:
    """The probe summed llama.cpp's slots' n_ctx: the report neither says the server did
    not report its pool nor shows that sum as a pool (its slots are separate contexts)."""
    man = manifest(duration_s=40.0)
    man["probe"] = {
        "kind": "llamacpp",
        "kv_pool_tokens": 524_288,
        "kv_pool_source": "sum of /slots n_ctx (16 slots)",
    }
    man["collectors"]["server"] = {"dialect": "llamacpp", "kv_pool_tokens": None, "restarts": 0}
    reqs = [
        request(u, r, 10.0 * r + u, conv=4000 * r, cached=3000 * (r - 1), reusable=4000 * (r - 1))
        for u in range(2)
        for r in range(1, 4)
    ]
    d = write_run(tmp_path, man, reqs, server=[{"t": 1.0, "up": True, "values": {}}])
    text = " ".join(capacity_section(analyze(d), charts=False).paragraphs)
    assert "did not report its KV pool" not in text
    assert "against a KV pool of" not in text and "524,288" not in text
    assert "llama.cpp's slots are separate contexts" in text
    assert build_summary(d)["server"]["kv_pool_tokens"] is None


# ---- one real run, every output ----------------------------------------------------------


@pytest.mark.slow
async def test_every_output_shows_the_same_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A simulator run through the real engine: the end-of-run terminal summary,
    summary.json, the report (both renderings), ``stress ls``, ``stress compare`` and the
    live view's last snapshot with its TUI badge agree on the verdict, the SLO grade and
    its factor, the capacity answer, TTFT p95, retention and output tokens."""
    import stress.runtime.run
    from stress.config.scenario import load_scenario
    from stress.runtime.run import execute

    lives: list[Live] = []

    class KeptLive(Live):
        def __init__(self, n_users: int, time_scale: float = 1.0) -> None:
            super().__init__(n_users, time_scale)
            lives.append(self)

    monkeypatch.setattr(stress.runtime.run, "Live", KeptLive)
    p = tmp_path / "s.yaml"
    p.write_text(f"""\
name: one_place
target: {{url: sim, sim: {{kv_tokens: 6000, time_scale: 20, seed: 3,
  reply_tokens_min: 16, reply_tokens_max: 40}}}}
users: {{count: 3, ramp_up: 1s, think_time: {{min: 0.5s, max: 1s}}}}
duration: 90s
conversation:
  cache: per_user
  ceiling_tokens: 5000
  turn:
    paste: {{corpus: {ROOT / "corpora" / "en"}, tokens: [500, 900]}}
    ask: ["Summarise."]
request: {{max_tokens: 48}}
warmup: {{rounds: 1}}
telemetry: {{interval: 0.5s}}
slo: {{ttft_p95: 0.001s}}
""")
    outcome = await execute(load_scenario(p), tmp_path / "out")
    terminal = capsys.readouterr().out
    d = outcome.run_dir
    summary = orjson.loads((d / "summary.json").read_bytes())
    snap: Snapshot = lives[0].snapshot(0.0)
    overall = summary["overall"]
    assert summary["warmup_requests"] > 0 and overall["requests"] >= 20

    p95 = overall["ttft_s"]["p95"]
    assert p95 is not None
    report = make_report(d, charts=False)
    row = row_for(d)
    assert row.ttft_p95_s == p95
    headline = next(r for r in report.headline.rows if r[0].startswith("TTFT"))
    assert headline[3] == f"{p95:.3g}" or float(headline[3]) == pytest.approx(p95, rel=5e-3)

    # one verdict and one SLO grade, everywhere
    verdict = summary["verdict"]
    (check,) = verdict["slo"]
    assert check["value"] == p95 and check["status"] == "MISSED" and check["factor"] > 2
    status, factor = verdict["status"], times(check["factor"])
    assert status == "FAIL"  # missed by far more than 2x
    assert f"verdict: {verdict['summary']}" in terminal
    assert f"TTFT p95 MISSED {factor}" in verdict["summary"]
    assert report.verdict.status == status and report.verdict.summary == verdict["summary"]
    assert f"SLO: {check['text']}." in report.verdict.items
    assert row.verdict == status and row.slo == f"TTFT p95 MISSED {factor}"
    comparison = compare([d, d])
    head = comparison.verdicts.columns
    for cells in comparison.verdicts.rows:
        assert cells[2:5] == [status, row.slo, row.within_slo]
        assert cells[head.index("TTFT p95 s")] == f"{p95:.3g}"
    badge = judge(snap, Counter(), 0, 0, {"ttft_p95": 0.001})
    assert badge.level == "bad" and f"TTFT p95 {factor} SLO" in badge.reasons
    assert snap.ttft_p95_run == pytest.approx(p95)

    # one capacity answer, everywhere
    sentence = summary["capacity"]["sentence"]
    assert f"capacity: {sentence}" in terminal
    assert report.capacity == sentence
    assert (
        report.sections[0].id == "capacity" and report.sections[0].paragraphs[0] == sentence + "."
    )
    from stress.report.render_html import render_html
    from stress.report.render_md import render_md

    html, md = render_html(report), render_md(report)
    assert html.index("Capacity:") < html.index('id="headline"')
    assert f"**Capacity:** {sentence}." in md

    ret = overall["cache_retention"]
    assert ret is not None and 0.0 < ret <= 1.0
    assert snap.cache_retention == pytest.approx(ret)
    per_user = _table(report, "per-user")
    col = per_user.columns.index("retention")
    for cells in per_user.rows:
        assert cells[col] == f"{100 * summary['per_user'][cells[0]]['cache_retention']:.1f}%"
    for u in snap.users:
        assert u.last_retention is None or 0.0 <= u.last_retention <= 1.0

    assert snap.output_tokens == overall["completion_tokens"] > 0
    assert summary["gpu"] is None or summary["gpu"].get("j_per_token") is None


def test_docs_table_of_figures_is_generated_from_the_one_table() -> None:
    """docs/metrics.md and the report's definitions come from ``figures.FIGURES``."""
    from stress.report.headline import DEFINITIONS

    docs = (ROOT / "docs" / "metrics.md").read_text()
    start = docs.index("python -m stress.analysis.figures -->\n") + len(
        "python -m stress.analysis.figures -->\n"
    )
    end = docs.index("<!-- end generated -->")
    assert docs[start:end] == figures.definitions_markdown(), (
        "docs/metrics.md is out of date: regenerate its table with "
        "`python -m stress.analysis.figures`"
    )
    assert [name for name, _ in DEFINITIONS] == [f.name for f in figures.FIGURES]


@pytest.mark.parametrize("q", [50, 95, 99, 0, 100])
def test_the_live_running_percentile_is_the_summarys_percentile(q: float) -> None:
    """The live view's exact percentile, kept as values arrive, equals ``percentile`` (the
    one definition, numpy's linear interpolation) at every count, ties and spread alike."""
    import random

    rng = random.Random(q)
    for values in (
        [rng.expovariate(1.0) for _ in range(600)],
        [float(rng.randint(0, 5)) for _ in range(300)],  # many ties
        [rng.uniform(-1e6, 1e6) for _ in range(300)],
    ):
        running = figures.RunningPercentile(q)
        assert running.value() is None
        for i, v in enumerate(values, 1):
            running.add(v)
            assert len(running) == i
            assert running.value() == figures.percentile(values[:i], q), (q, i)


def test_gpu_sample_figures_leave_out_unread_samples() -> None:
    nan = float("nan")
    assert figures.sample_mean([100.0, nan, 300.0]) == 200.0
    assert figures.sample_peak([100.0, nan, 300.0]) == 300.0
    assert figures.sample_mean([nan, nan]) is None
    assert figures.sample_peak([]) is None


def test_live_window_figures() -> None:
    assert figures.live_ttft_p50([0.3, 0.1, 0.2, 0.4]) == 0.25
    assert figures.live_ttft_p50([]) is None
    assert figures.live_output_tok_s(600, 60.0) == 10.0
    assert figures.live_output_tok_s(600, 0.0) == 0.0
    assert figures.live_cached_share(25, 100) == 0.25
    assert figures.live_cached_share(0, 0) is None
