"""Concurrency, working set and SLO crossings derived from requests.jsonl."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stress.analysis.rundata import load_run
from stress.report.capacity import (
    Slo,
    capacity_section,
    in_flight_at_start,
    length_table,
    working_set,
    working_set_at,
)
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
    series = working_set(recs)
    at = working_set_at(series, np.array([0.5, 1.5, 2.5, 4.0, 5.5, 8.0]))
    assert list(at) == [1000, 4000, 4100, 4150, 5050, 5060]


def test_slo_crossing_bucket_and_pool_needed(tmp_path: Path) -> None:
    reqs = []
    for rnd, conv in enumerate([1000, 3000, 5000, 7000, 9000], start=1):
        for u in range(4):
            t = (rnd - 1) * 40.0 + u * 10.0
            reqs.append(
                request(
                    u, rnd, t, ttft=conv / 1000.0, conv=conv, cached=conv // 4, reusable=conv // 2
                )
            )
    man = manifest(
        users=4, duration_s=250.0, pool=20_000.0, slo={"ttft_p95": 6.0, "decode_tok_s_p50": 5.0}
    )
    run = load_run(write_run(tmp_path, man, reqs))
    table, first_ttft, first_decode = length_table(run, Slo.of(run))
    assert [r[0] for r in table.rows] == ["0-2k", "2k-4k", "4k-6k", "6k-8k", "8k-10k"]
    assert first_ttft is not None and first_ttft.startswith("6k-8k")
    assert first_decode is None
    text = " ".join(capacity_section(run).paragraphs)
    assert "first missed at 6k-8k" in text
    # every user ends at 9,000 tokens + 80 reply tokens: 4 x 9,080 = 36,320 live tokens
    assert "Peak working set 36,320 tokens" in text
    assert f"at least {round(36_320 * 1.1):,} tokens" in text
    assert "Cache retention was below 90.0%" in text


def test_no_slo_says_so(tmp_path: Path) -> None:
    run = load_run(write_run(tmp_path, manifest(), [request(0, 1, 0.0)]))
    assert "sets no SLO" in capacity_section(run).paragraphs[0]
    assert Slo.of(run) == Slo(None, None)
    with pytest.raises(AssertionError):
        assert Slo.of(run).ttft_p95_s
