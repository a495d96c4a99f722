"""Prefix-cache physics seen through usage.cached_tokens and /metrics."""

from __future__ import annotations

import aiohttp

from stress.sim import SimConfig, start_sim
from tests.sim.helpers import get_metrics, stream_chat

DOC = "The quarterly report covers revenue, costs and the outlook for next year. " * 60


def cfg(**kw: object) -> SimConfig:
    base: dict[str, object] = {
        "time_scale": 500.0,
        "reply_tokens_min": 30,
        "reply_tokens_max": 90,
        "block_size": 16,
    }
    base.update(kw)
    return SimConfig.model_validate(base)


async def test_second_turn_hits_block_aligned_prompt_plus_reply(
    session: aiohttp.ClientSession,
) -> None:
    sim = await start_sim(cfg(kv_tokens=200_000))
    try:
        msgs = [
            {"role": "system", "content": "[user 1 a8f3] You are helpful."},
            {"role": "user", "content": DOC + "Summarise."},
        ]
        for _turn in range(3):
            first = await stream_chat(session, sim.url, msgs)
            assert first.usage is not None
            msgs += [
                {"role": "assistant", "content": first.content},
                {"role": "user", "content": "And the risks?"},
            ]
            second = await stream_chat(session, sim.url, msgs)
            assert second.usage is not None
            prev = first.usage["prompt_tokens"] + first.usage["completion_tokens"]
            assert second.usage["prompt_tokens_details"]["cached_tokens"] == prev // 16 * 16
            msgs += [{"role": "assistant", "content": second.content}]
            msgs += [{"role": "user", "content": "More."}]
    finally:
        await sim.close()


async def test_cold_mode_marker_first_gives_zero(session: aiohttp.ClientSession) -> None:
    sim = await start_sim(cfg(kv_tokens=200_000))
    try:
        for i in range(4):
            msgs = [{"role": "user", "content": f"[cold {i}] " + DOC}]
            reply = await stream_chat(session, sim.url, msgs)
            assert reply.usage is not None
            assert reply.usage["prompt_tokens_details"]["cached_tokens"] == 0
        # Sending the very same prompt again does hit: the zeros above were not a bug.
        again = await stream_chat(session, sim.url, msgs)
        assert again.usage is not None
        assert again.usage["prompt_tokens_details"]["cached_tokens"] > 0
    finally:
        await sim.close()


async def test_unique_user_prefixes_share_nothing(session: aiohttp.ClientSession) -> None:
    sim = await start_sim(cfg(kv_tokens=200_000))
    try:
        for uid in range(3):
            msgs = [
                {"role": "system", "content": f"[user {uid}] Same system prompt for all."},
                {"role": "user", "content": DOC},
            ]
            reply = await stream_chat(session, sim.url, msgs)
            assert reply.usage is not None
            assert reply.usage["prompt_tokens_details"]["cached_tokens"] == 0
        # With a shared prefix (no marker) the second user does hit.
        shared = [{"role": "system", "content": "Shared."}, {"role": "user", "content": DOC}]
        await stream_chat(session, sim.url, shared)
        other = await stream_chat(session, sim.url, [*shared[:1], {"role": "user", "content": DOC}])
        assert other.usage is not None
        assert other.usage["prompt_tokens_details"]["cached_tokens"] > 0
    finally:
        await sim.close()


async def test_prefix_caching_off_reports_zero(session: aiohttp.ClientSession) -> None:
    sim = await start_sim(cfg(prefix_caching=False))
    try:
        msgs = [{"role": "user", "content": DOC}]
        await stream_chat(session, sim.url, msgs)
        again = await stream_chat(session, sim.url, msgs)
        assert again.usage is not None
        assert again.usage["prompt_tokens_details"]["cached_tokens"] == 0
        m = await get_metrics(session, sim.url)
        assert m["vllm:prefix_cache_hits_total"] == 0
        assert m["vllm:prefix_cache_queries_total"] == 2 * again.usage["prompt_tokens"]
    finally:
        await sim.close()


async def test_cached_tokens_can_be_switched_off(session: aiohttp.ClientSession) -> None:
    sim = await start_sim(cfg(report_cached_tokens=False))
    try:
        reply = await stream_chat(session, sim.url, [{"role": "user", "content": "hi"}])
        assert reply.usage is not None and "prompt_tokens_details" not in reply.usage
    finally:
        await sim.close()
