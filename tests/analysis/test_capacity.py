"""The capacity answer: buckets, rules and the sentence, from runs with known values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stress.analysis.analyze import analyze
from stress.analysis.capacity import (
    Limits,
    capacity_answer,
    in_flight_at_start,
    ladder_edges,
    make_bucket,
    within,
)
from stress.analysis.causes import working_set
from stress.analysis.rundata import load_run
from stress.core.limits import MIN_SAMPLES
from stress.report.capacity import capacity_section
from tests.report.synth import manifest, request, write_run


def test_in_flight_from_overlapping_intervals() -> None:
    recs = [
        request(0, 1, 0.0, e2e=10.0),
        request(1, 1, 2.0, e2e=3.0),  # 2..5
        request(2, 1, 4.0, e2e=10.0),  # starts while 0 and 1 run
        request(1, 2, 6.0, e2e=1.0),  # 1 has ended; 0 and 2 run
    ]
    assert list(in_flight_at_start(recs)) == [1.0, 2.0, 3.0, 3.0]


def test_working_set_is_sum_of_live_conversations() -> None:
    recs = [
        request(0, 1, 0.0, e2e=2.0, conv=1000, completion=100),
        request(1, 1, 1.0, e2e=2.0, conv=3000, completion=50),
        request(0, 2, 5.0, e2e=2.0, conv=2000, completion=10),
    ]
    times, sums = working_set(recs)
    idx = np.searchsorted(times, np.array([0.5, 1.5, 2.5, 4.0, 5.5, 8.0]), side="right") - 1
    assert list(sums[idx]) == [1000, 4000, 4100, 4150, 5050, 5060]


def test_in_flight_buckets_are_a_ladder_not_one_row_per_integer() -> None:
    """64 users gave a 64-row table; the ladder keeps it near ten rows."""
    assert ladder_edges(64) == [1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64]
    assert ladder_edges(3) == [1, 2, 3]


def test_a_bucket_under_min_samples_is_not_judged() -> None:
    limits = Limits(ttft_s=1.0, decode_tok_s=None)
    few = [request(0, 2, float(i), ttft=50.0) for i in range(3)]  # p95 from n = 3: noise
    b = make_bucket("x", 0, 1, few, limits)
    assert b.status == "NOT ENOUGH DATA" and b.ttft_ci is None
    many = [request(0, 2, float(i), ttft=50.0) for i in range(MIN_SAMPLES)]
    b = make_bucket("x", 0, 1, many, limits)
    assert b.status == "MISSED" and b.factor == pytest.approx(50.0) and b.ttft_ci is not None
    assert b.goodput == 0.0


def _growing(users: int = 4, rounds: int = 8, per_round: int = 25) -> list[dict[str, object]]:
    """Conversations of ``users`` growing 1,000 tokens a round, TTFT = length / 1000 s on
    follow-ups, and a slow cold first turn (10 s) each user starts with."""
    reqs: list[dict[str, object]] = []
    for rnd in range(1, rounds + 1):
        for u in range(users):
            for k in range(per_round // users + 1):
                conv = 1000 * rnd
                t = rnd * 100.0 + u * 10.0 + k
                ttft = 10.0 if rnd == 1 else conv / 1000.0
                r = request(
                    u,
                    rnd,
                    t,
                    ttft=ttft,
                    e2e=0.5,
                    conv=conv,
                    cached=conv - 500,
                    reusable=conv - 500 if rnd > 1 else 0,
                )
                reqs.append(r)
    return reqs


def test_cold_first_turns_are_judged_apart(tmp_path: Path) -> None:
    """The 'first missed at 0-5k tokens' defect: the cold first turns (TTFT 10 s) sat in the
    shortest length bucket and made it the first miss."""
    man = manifest(users=4, duration_s=900.0, slo={"ttft_p95": 6.0})
    a = capacity_answer(load_run(write_run(tmp_path, man, _growing())))
    assert a.first_turns is not None and a.first_turns.ttft_p95 == pytest.approx(10.0)
    assert [b.label for b in a.by_length][:2] == ["2k-3k", "3k-4k"]
    met, missed = within(a.by_length)
    assert met is not None and met.label == "6k-7k"  # 6 s at 6k tokens: within the SLO
    assert missed is not None and missed.label == "7k-8k"
    assert "within SLO up to ~7,000 tokens" in a.sentence


def test_sentence_names_the_slo_figure_and_the_limit(tmp_path: Path) -> None:
    man = manifest(users=4, duration_s=900.0, slo={"ttft_p95": 6.0}, pool=20_000.0)
    a = analyze(write_run(tmp_path, man, _growing())).capacity
    assert a.sentence.startswith("4 users, conversations up to 8,000 tokens: TTFT p95 ")
    assert "vs SLO 6 s: MISSED x" in a.sentence
    assert a.goodput is not None and 0 < a.goodput < 1
    assert set(a.goodput_by_user) == {0, 1, 2, 3}


def test_retention_is_bucketed_by_share_of_the_pool(tmp_path: Path) -> None:
    """Retention buckets used to collapse into one; by pool share they spread."""
    man = manifest(users=4, duration_s=900.0, pool=16_000.0)
    a = capacity_answer(load_run(write_run(tmp_path, man, _growing())))
    labels = [b.label for b in a.retention]
    assert (len(labels) >= 4 and labels[0].startswith("<")) or "-" in labels[0]
    assert all("%" in label for label in labels)


def test_no_slo_gives_figures_and_says_so(tmp_path: Path) -> None:
    run = load_run(write_run(tmp_path, manifest(), [request(0, 1, 0.0)]))
    a = capacity_answer(run)
    assert "no SLO set" in a.sentence and "TTFT p95 1 s (n = 1)" in a.sentence
    assert all(b.status == "NO SLO" for b in a.by_length + a.by_concurrency)


def test_report_section_leads_with_the_sentence(tmp_path: Path) -> None:
    man = manifest(users=4, duration_s=900.0, slo={"ttft_p95": 6.0}, pool=20_000.0)
    analysis = analyze(write_run(tmp_path, man, _growing()))
    section = capacity_section(analysis, charts=False)
    assert section.paragraphs[0] == analysis.capacity.sentence + "."
    assert [t.id for t in section.tables] == ["by-concurrency", "by-length", "retention-ws"]
    text = " ".join(section.paragraphs)
    assert "Peak working set" in text and "First turns of conversations" in text


def test_a_replays_finished_requests_leave_the_working_set(tmp_path: Path) -> None:
    """Request i of a trace is user i and never comes back: 40 requests one after another
    hold one conversation at a time, not 40 (they were summed for good)."""
    from stress.analysis.causes import run_working_set

    man = manifest(users=40)
    man["scenario"]["replay"] = {"trace": "t.jsonl"}
    reqs = [request(i, 1, i * 10.0, conv=2000, completion=50, e2e=5.0) for i in range(40)]
    run = load_run(write_run(tmp_path, man, reqs))
    _times, sums = run_working_set(run)
    assert sums.max() == 2000.0 and sums[-1] == 0.0
    assert capacity_answer(run).peak_working_set == 2000.0
    del man["scenario"]["replay"]  # the same records as users' conversations: they stay
    chat = load_run(write_run(tmp_path / "chat", man, reqs))
    assert run_working_set(chat)[1].max() == 40 * 2050.0
