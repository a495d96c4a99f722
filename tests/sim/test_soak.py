"""Eight users for a simulated hour, in well under a minute of wall time.

A direct aiohttp client loop (no engine from the core): every user grows a conversation
with pastes and questions, thinks between turns, and starts over past a ceiling. The run
must finish, lose nothing, and the server's own counters must equal what the replies said.
"""

from __future__ import annotations

import asyncio
import random
import time

import aiohttp

from stress.sim import SimConfig, start_sim
from tests.sim.helpers import get_metrics, stream_chat

WORDS = [
    "river",
    "stone",
    "cloud",
    "paper",
    "signal",
    "forest",
    "engine",
    "harbor",
    "window",
    "garden",
    "copper",
]
SIM_HOUR = 3600.0
SCALE = 300.0


async def test_eight_users_for_a_simulated_hour() -> None:
    cfg = SimConfig(
        kv_tokens=40_000,
        block_size=16,
        max_seqs=8,
        time_scale=SCALE,
        reply_tokens_min=40,
        reply_tokens_max=120,
        seed=3,
    )
    sim = await start_sim(cfg)
    totals = {"requests": 0, "errors": 0, "prompt": 0, "cached": 0, "completion": 0}
    rounds = [0] * 8
    wall0 = time.perf_counter()

    async def user(uid: int, session: aiohttp.ClientSession) -> None:
        rng = random.Random(uid)
        conv = 0
        msgs = [{"role": "system", "content": f"[user {uid} conv {conv}] Be brief."}]
        while sim.engine.sim_now() < SIM_HOUR:
            doc = " ".join(rng.choice(WORDS) for _ in range(rng.randint(400, 900)))
            msgs.append({"role": "user", "content": doc + "\nWhat is this about?"})
            reply = await stream_chat(session, sim.url, msgs, max_tokens=100)
            totals["requests"] += 1
            if reply.usage is None or not reply.done:
                totals["errors"] += 1
                msgs.pop()
                continue
            rounds[uid] += 1
            totals["prompt"] += reply.usage["prompt_tokens"]
            totals["cached"] += reply.usage["prompt_tokens_details"]["cached_tokens"]
            totals["completion"] += reply.usage["completion_tokens"]
            msgs.append({"role": "assistant", "content": reply.content})
            if reply.usage["total_tokens"] > 9000:
                conv += 1
                msgs = [{"role": "system", "content": f"[user {uid} conv {conv}] Be brief."}]
            await asyncio.sleep(rng.uniform(20.0, 60.0) / SCALE)

    try:
        conn = aiohttp.TCPConnector(limit=0, force_close=True)
        async with aiohttp.ClientSession(connector=conn) as session:
            await asyncio.gather(*(user(u, session) for u in range(8)))
            metrics = await get_metrics(session, sim.url)
        wall = time.perf_counter() - wall0
        records = list(sim.ground_truth.records)
    finally:
        await sim.close()

    assert wall < 60.0, f"a simulated hour took {wall:.1f} s of wall time"
    assert totals["errors"] == 0
    assert min(rounds) >= 20, rounds
    assert metrics["vllm:prompt_tokens_total"] == totals["prompt"]
    assert metrics["vllm:prefix_cache_hits_total"] == totals["cached"]
    assert metrics["vllm:generation_tokens_total"] == totals["completion"]
    assert len(records) == totals["requests"]
    assert all(r.tokens_sent == r.completion_tokens for r in records)
    # 8 conversations of up to ~9k tokens nearly fill a 40k pool: some reuse, far from all.
    hit = totals["cached"] / totals["prompt"]
    assert 0.05 < hit < 0.95, hit
    print(f"\nsoak: wall {wall:.1f}s, rounds {rounds}, hit {hit:.0%}, lag {sim.engine.lag_s:.3f}s")
