"""Time scale, the speed model and ground truth agree with what a client measures."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import orjson

from stress.sim import SimConfig, start_sim
from stress.sim.speed import SpeedModel
from tests.sim.helpers import stream_chat


def test_step_model_mixes_prefill_into_decode() -> None:
    cfg = SimConfig(decode_batch_slowdown=0.1, decode_context_slowdown_per_1k=0.0)
    speed = SpeedModel.from_config(cfg)
    alone = speed.step_s(0, 1, 0)
    assert abs(alone - 1 / 40) < 1e-9
    assert abs(speed.step_s(0, 5, 0) - 1.4 / 40) < 1e-9  # batch of 5: +40 %
    # A 2048-token prefill chunk shares the step: the decoders wait for it.
    assert speed.step_s(2048, 1, 0) - alone == 2048 / 4000


async def test_wall_time_is_simulated_time_over_scale(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    gt = tmp_path / "truth.jsonl"
    cfg = SimConfig(
        time_scale=20.0,
        decode_tokens_per_s=40.0,
        prefill_tokens_per_s=4000.0,
        reply_tokens_min=80,
        reply_tokens_max=80,
        ground_truth_path=str(gt),
    )
    sim = await start_sim(cfg)
    try:
        msgs = [{"role": "user", "content": "word " * 3990}]
        t0 = time.perf_counter()
        reply = await stream_chat(session, sim.url, msgs)
        wall = time.perf_counter() - t0
    finally:
        await sim.close()
    assert reply.usage is not None
    # ~4,000 prompt tokens at 4,000 tok/s = 1 s; 80 tokens at 40 tok/s = 2 s: 3 sim s.
    rec = orjson.loads(gt.read_bytes().splitlines()[0])
    assert abs(rec["sim_ttft_s"] - 1.0) < 0.05
    assert abs(rec["sim_e2e_s"] - 3.0) < 0.1
    assert 3.0 / 20.0 - 0.01 <= wall < 3.0 / 20.0 + 0.1, wall
    assert abs(rec["e2e_s"] - wall) < 0.03
    assert rec["tokens_sent"] == rec["completion_tokens"] == 80
    assert rec["prompt_tokens"] == reply.usage["prompt_tokens"]
    assert rec["first_token_at"] >= rec["received_at"]
    assert rec["finish_reason"] == "stop" and rec["fault"] is None


async def test_long_paste_slows_everyone_elses_decode(session: aiohttp.ClientSession) -> None:
    cfg = SimConfig(time_scale=50.0, reply_tokens_min=150, reply_tokens_max=150)
    sim = await start_sim(cfg)
    try:
        chatter = asyncio.create_task(
            stream_chat(session, sim.url, [{"role": "user", "content": "hi"}])
        )
        await asyncio.sleep(0.5 / 50)  # the chatter is decoding; now someone pastes 16k
        paste = asyncio.create_task(
            stream_chat(session, sim.url, [{"role": "user", "content": "long " * 16000}])
        )
        await asyncio.gather(chatter, paste)
        recs = {r.prompt_tokens < 100: r for r in sim.ground_truth.records}
    finally:
        await sim.close()
    alone_s = 150 / 40.0
    chatter_rec = recs[True]
    assert chatter_rec.sim_e2e_s is not None and chatter_rec.sim_ttft_s is not None
    # 16k tokens of prefill at 4,000 tok/s add ~4 s to the chatter's decode.
    assert chatter_rec.sim_e2e_s - chatter_rec.sim_ttft_s > alone_s + 3.0


async def test_waiting_queue_beyond_max_seqs(session: aiohttp.ClientSession) -> None:
    cfg = SimConfig(time_scale=10.0, max_seqs=2, reply_tokens_min=100, reply_tokens_max=100)
    sim = await start_sim(cfg)
    try:
        tasks = [
            asyncio.create_task(
                stream_chat(session, sim.url, [{"role": "user", "content": f"{i}"}])
            )
            for i in range(4)
        ]
        await asyncio.sleep(0.05)  # 0.5 simulated s: the first two are decoding
        running, waiting = len(sim.engine.running), len(sim.engine.waiting)
        await asyncio.gather(*tasks)
    finally:
        await sim.close()
    assert (running, waiting) == (2, 2)
