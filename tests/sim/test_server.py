"""The simulator speaks OpenAI over real loopback HTTP: models, health, streamed and whole."""

from __future__ import annotations

import aiohttp
import orjson

from stress.sim import RunningSim, SimConfig, start_sim
from tests.sim.helpers import stream_chat

MSGS = [{"role": "system", "content": "You help."}, {"role": "user", "content": "Say hello."}]


async def test_url_and_port(fast_sim: RunningSim) -> None:
    assert fast_sim.port > 0
    assert fast_sim.url == f"http://127.0.0.1:{fast_sim.port}"


async def test_models_and_health(fast_sim: RunningSim, session: aiohttp.ClientSession) -> None:
    async with session.get(fast_sim.url + "/v1/models") as r:
        body = await r.json()
    assert body["data"][0]["id"] == "sim-llm"
    assert body["data"][0]["owned_by"] == "vllm"
    async with session.get(fast_sim.url + "/health") as r:
        assert r.status == 200


async def test_stream_with_usage(fast_sim: RunningSim, session: aiohttp.ClientSession) -> None:
    reply = await stream_chat(session, fast_sim.url, MSGS)
    assert reply.status == 200
    assert reply.done
    assert reply.finish_reason == "stop"
    assert reply.usage is not None
    assert reply.content_chunks == reply.usage["completion_tokens"] > 0
    assert reply.usage["prompt_tokens_details"]["cached_tokens"] == 0
    assert reply.usage["total_tokens"] == (
        reply.usage["prompt_tokens"] + reply.usage["completion_tokens"]
    )
    # The usage chunk is last and has no choices, as vLLM sends it.
    assert reply.chunks[-1]["choices"] == []
    assert reply.reasoning_chunks == 0


async def test_max_tokens_gives_length(
    fast_sim: RunningSim, session: aiohttp.ClientSession
) -> None:
    reply = await stream_chat(session, fast_sim.url, MSGS, max_tokens=3)
    assert reply.finish_reason == "length"
    assert reply.usage is not None and reply.usage["completion_tokens"] == 3


async def test_non_streamed(fast_sim: RunningSim, session: aiohttp.ClientSession) -> None:
    async with session.post(
        fast_sim.url + "/v1/chat/completions", json={"model": "sim-llm", "messages": MSGS}
    ) as r:
        assert r.status == 200
        body = orjson.loads(await r.read())
    msg = body["choices"][0]["message"]
    assert msg["role"] == "assistant" and msg["content"]
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert body["choices"][0]["finish_reason"] == "stop"


async def test_without_include_usage_no_usage_chunk(
    fast_sim: RunningSim, session: aiohttp.ClientSession
) -> None:
    reply = await stream_chat(session, fast_sim.url, MSGS, stream_options={})
    assert reply.done and reply.usage is None


async def test_bad_body_is_400(fast_sim: RunningSim, session: aiohttp.ClientSession) -> None:
    async with session.post(fast_sim.url + "/v1/chat/completions", data=b"{nope") as r:
        assert r.status == 400
    async with session.post(fast_sim.url + "/v1/chat/completions", json={"messages": []}) as r:
        assert r.status == 400


async def test_prompt_tokens_are_real_tokens(session: aiohttp.ClientSession) -> None:
    sim = await start_sim(SimConfig(time_scale=200.0, reply_tokens_min=4, reply_tokens_max=4))
    try:
        short = await stream_chat(session, sim.url, [{"role": "user", "content": "hi"}])
        long = await stream_chat(session, sim.url, [{"role": "user", "content": "hi " * 500}])
    finally:
        await sim.close()
    assert short.usage is not None and long.usage is not None
    # "hi " * 500 is 500 tokens more than "hi" in cl100k (plus the template's few tokens).
    assert long.usage["prompt_tokens"] - short.usage["prompt_tokens"] == 500
