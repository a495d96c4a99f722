"""Parser and dialect mapping on /metrics payloads published by others (see each README)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stress.collectors.prometheus import canonical, detect_dialect, parse_metrics

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def _load(name: str) -> str:
    return (FIX / name / "metrics.txt").read_text()


def test_sglang_04_docs_payload() -> None:
    ms = parse_metrics(_load("published-sglang-0.4-docs"))
    assert detect_dialect(ms) == "sglang"
    v = canonical(ms, "sglang")
    assert v["running"] == 162
    assert v["waiting"] == 2826
    assert v["kv_usage"] == pytest.approx(0.28)
    assert v["kv_used_tokens"] == 123859
    assert v["prompt_tokens"] == 8128902
    assert v["gen_tokens"] == 7557572
    # no realtime_tokens_total in this era: progress falls back to prompt + generation
    assert v["progress"] == 8128902 + 7557572
    assert v["batch_hit_rate"] == pytest.approx(0.007507552643049313)
    # this era has no cumulative prefix counters and no max_total_num_tokens
    assert "prefix_queries" not in v and "prefix_hits" not in v
    assert "kv_pool_tokens" not in v


def test_vllm_v0_old_names_picked_up_through_fallback() -> None:
    ms = parse_metrics(_load("published-vllm-0.6-v0"))
    assert detect_dialect(ms) == "vllm"
    assert not ms.has("vllm:kv_cache_usage_perc")
    assert ms.has("vllm:gpu_cache_usage_perc")
    v = canonical(ms, "vllm")
    assert v["kv_usage"] == 0.0  # from gpu_cache_usage_perc
    assert v["running"] == 0 and v["waiting"] == 0
    assert v["kv_pool_tokens"] == 2375 * 16  # num_gpu_blocks x block_size
    assert v["prompt_tokens"] == 0 and v["gen_tokens"] == 0 and v["preemptions"] == 0
    # V0 only had the gpu_prefix_cache_hit_rate gauge (-1.0 here), never counters
    assert "prefix_queries" not in v and "prefix_hits" not in v


def test_llamacpp_fork_with_kv_cache_usage_ratio() -> None:
    ms = parse_metrics(_load("published-llamacpp-ik-2025-08"))
    assert detect_dialect(ms) == "llamacpp"
    assert ms.has("llamacpp:kv_cache_tokens")
    v = canonical(ms, "llamacpp")
    assert v["kv_usage"] == pytest.approx(0.491063)
    assert v["running"] == 0 and v["waiting"] == 0
    assert v["prompt_computed_tokens"] == 6886
    assert v["prompt_tokens"] == 6886  # no cached counter: only computed tokens known
    assert v["gen_tokens"] == 3469
    assert "prefix_hits" not in v and "prefix_queries" not in v
    assert "progress" not in v  # no n_decode_total in this build


def test_llamacpp_windows_nan_ind_payload() -> None:
    """MSVC prints NaN as '-nan(ind)': one NaN sample must not cost the whole scrape."""
    ms = parse_metrics(_load("published-llamacpp-windows-2024-nan"))
    assert detect_dialect(ms) == "llamacpp"
    assert not ms.has("llamacpp:n_busy_slots_per_decode_total")  # NaN dropped
    v = canonical(ms, "llamacpp")
    assert v["kv_usage"] == 0.0
    assert v["running"] == 0 and v["waiting"] == 0
    assert v["progress"] == 0  # n_decode_total
