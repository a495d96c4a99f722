"""A pool smaller than the users' conversations: hit rate collapses, preemptions appear."""

from __future__ import annotations

import asyncio
import random

import aiohttp

from stress.sim import SimConfig, start_sim
from tests.sim.helpers import get_metrics, stream_chat

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "river",
    "mountain",
    "window",
    "garden",
    "engine",
    "signal",
]


async def sweep_point(users: int, session: aiohttp.ClientSession) -> tuple[float, dict[str, float]]:
    """Users x 8 rounds of ~600-token pastes against a 16k-token pool; returns hit rate."""
    sim = await start_sim(
        SimConfig(
            kv_tokens=16_384,
            max_seqs=16,
            time_scale=1000.0,
            reply_tokens_min=40,
            reply_tokens_max=40,
            seed=5,
        )
    )
    prompt = cached = completion = 0
    try:

        async def user(uid: int) -> None:
            nonlocal prompt, cached, completion
            rng = random.Random(uid)
            msgs = [{"role": "system", "content": f"[user {uid}]"}]
            for _ in range(8):
                doc = " ".join(rng.choice(WORDS) for _ in range(600))
                msgs.append({"role": "user", "content": doc})
                reply = await stream_chat(session, sim.url, msgs)
                assert reply.usage is not None and reply.done
                prompt += reply.usage["prompt_tokens"]
                cached += reply.usage["prompt_tokens_details"]["cached_tokens"]
                completion += reply.usage["completion_tokens"]
                msgs.append({"role": "assistant", "content": reply.content})
                await asyncio.sleep(rng.uniform(0.002, 0.01))

        await asyncio.gather(*(user(u) for u in range(users)))
        m = await get_metrics(session, sim.url)
    finally:
        await sim.close()
    # The server's counters agree with the replies' usage, token for token.
    assert m["vllm:prompt_tokens_total"] == prompt
    assert m["vllm:prefix_cache_queries_total"] == prompt
    assert m["vllm:prefix_cache_hits_total"] == cached
    assert m["vllm:generation_tokens_total"] == completion
    return cached / prompt, m


async def test_hit_rate_falls_as_users_grow_past_the_pool(
    session: aiohttp.ClientSession,
) -> None:
    # Each conversation reaches ~5k tokens: 1 and 2 users fit in 16k, 6 and 10 do not.
    rates = {}
    for users in (1, 2, 6, 10):
        rates[users], _m = await sweep_point(users, session)
    assert rates[1] > 0.7 and rates[2] > 0.7, rates
    assert rates[2] > rates[6] > rates[10], rates
    assert rates[10] < 0.5 * rates[1], rates


async def test_preemptions_appear_when_running_sequences_exceed_the_pool(
    session: aiohttp.ClientSession,
) -> None:
    async def burst(users: int) -> tuple[float, int]:
        sim = await start_sim(
            SimConfig(
                kv_tokens=8192,
                max_seqs=8,
                time_scale=1000.0,
                reply_tokens_min=300,
                reply_tokens_max=300,
            )
        )
        try:
            docs = [f"[u{u}] " + "word " * 1500 for u in range(users)]
            replies = await asyncio.gather(
                *(stream_chat(session, sim.url, [{"role": "user", "content": d}]) for d in docs)
            )
            assert all(r.done and r.finish_reason == "stop" for r in replies)
            m = await get_metrics(session, sim.url)
            return m["vllm:num_preemptions_total"], sum(
                r.preemptions for r in sim.ground_truth.records
            )
        finally:
            await sim.close()

    # One ~1.8k-token sequence fits; six of them (~11k tokens) cannot run together in 8k.
    assert await burst(1) == (0, 0)
    preempted, per_request = await burst(6)
    assert preempted > 0
    assert per_request == preempted
