"""Each injected fault shows exactly the symptom it names, on the wire."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from stress.sim import FaultRule, RunningSim, SimConfig, start_sim
from tests.sim.helpers import get_metrics, stream_chat

MSGS = [{"role": "user", "content": "Tell me a story."}]
SCALE = 100.0


def sim_cfg(*faults: FaultRule, **kw: Any) -> SimConfig:
    base: dict[str, Any] = {
        "time_scale": SCALE,
        "decode_tokens_per_s": 400.0,
        "reply_tokens_min": 20,
        "reply_tokens_max": 20,
        "faults": list(faults),
    }
    base.update(kw)
    return SimConfig.model_validate(base)


@pytest.fixture
async def make_sim() -> AsyncIterator[Any]:
    sims: list[RunningSim] = []

    async def make(*faults: FaultRule, **kw: Any) -> RunningSim:
        sim = await start_sim(sim_cfg(*faults, **kw))
        sims.append(sim)
        return sim

    yield make
    for sim in sims:
        await sim.close()


async def raw_lines(
    session: aiohttp.ClientSession, url: str, stream: bool = True
) -> tuple[aiohttp.ClientResponse, list[tuple[float, bytes]]]:
    """Every SSE data line with its arrival time; raises what the transport raises."""
    payload = {"model": "m", "messages": MSGS, "stream": stream}
    payload["stream_options"] = {"include_usage": True}
    lines: list[tuple[float, bytes]] = []
    async with session.post(url + "/v1/chat/completions", json=payload) as resp:
        buf = b""
        async for chunk in resp.content.iter_any():
            buf += chunk
            while b"\n\n" in buf:
                line, buf = buf.split(b"\n\n", 1)
                lines.append((time.perf_counter(), line))
        return resp, lines


def content_lines(lines: list[tuple[float, bytes]]) -> list[bytes]:
    out = []
    for _t, line in lines:
        try:
            obj = orjson.loads(line[6:])
        except orjson.JSONDecodeError:
            continue
        if (
            isinstance(obj, dict)
            and obj.get("choices")
            and obj["choices"][0]["delta"].get("content")
        ):
            out.append(line)
    return out


@pytest.mark.parametrize(
    ("kind", "status"), [("http_500", 500), ("http_503", 503), ("http_429", 429)]
)
async def test_http_errors(
    make_sim: Any, session: aiohttp.ClientSession, kind: str, status: int
) -> None:
    sim = await make_sim(FaultRule(kind=kind, on_requests=[2], retry_after_s=7))
    ok = await stream_chat(session, sim.url, MSGS)
    bad = await stream_chat(session, sim.url, MSGS)
    after = await stream_chat(session, sim.url, MSGS)
    assert ok.status == 200 and after.status == 200
    assert bad.status == status
    assert orjson.loads(bad.body)["error"]["code"] == status
    if kind == "http_429":
        async with session.post(sim.url + "/v1/chat/completions", json={"messages": MSGS}) as r:
            assert r.status == 200  # request 4 is fine again
        sim2 = await make_sim(FaultRule(kind="http_429", rate=1.0, retry_after_s=7))
        async with session.post(sim2.url + "/v1/chat/completions", json={"messages": MSGS}) as r:
            assert r.status == 429 and r.headers["Retry-After"] == "7"


async def test_reset_mid_stream(make_sim: Any, session: aiohttp.ClientSession) -> None:
    sim = await make_sim(FaultRule(kind="reset", rate=1.0, after_tokens=5))
    payload = {"messages": MSGS, "stream": True}
    got = b""
    with pytest.raises(aiohttp.ClientPayloadError) as exc:
        async with session.post(sim.url + "/v1/chat/completions", json=payload) as resp:
            assert resp.status == 200
            async for chunk in resp.content.iter_any():
                got += chunk
    # A TCP RST, not a clean close: the client sees "Connection reset by peer".
    assert "Connection reset by peer" in str(exc.value), repr(exc.value)
    assert got.count(b'"content":"') - 1 == 5  # role chunk + exactly five tokens
    assert b"[DONE]" not in got
    rec = sim.ground_truth.records[-1]
    assert (rec.fault, rec.tokens_sent, rec.finish_reason) == ("reset", 5, None)


async def test_stall_mid_stream(make_sim: Any, session: aiohttp.ClientSession) -> None:
    sim = await make_sim(FaultRule(kind="stall", rate=1.0, after_tokens=4, duration_s=30.0))
    _resp, lines = await raw_lines(session, sim.url)
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(lines)]
    # 30 simulated seconds at scale 100 = 0.3 s of silence, once; then the stream completes.
    assert max(gaps) >= 0.29
    assert sum(1 for g in gaps if g >= 0.2) == 1
    assert lines[-1][1] == b"data: [DONE]"
    assert len(content_lines(lines)) == 20


async def test_malformed_chunk(make_sim: Any, session: aiohttp.ClientSession) -> None:
    sim = await make_sim(FaultRule(kind="malformed_chunk", rate=1.0, after_tokens=3))
    _resp, lines = await raw_lines(session, sim.url)
    bad = []
    for _t, line in lines:
        if line == b"data: [DONE]":
            continue
        try:
            orjson.loads(line[6:])
        except orjson.JSONDecodeError:
            bad.append(line)
    assert len(bad) == 1
    assert lines[-1][1] == b"data: [DONE]"


async def test_no_done(make_sim: Any, session: aiohttp.ClientSession) -> None:
    sim = await make_sim(FaultRule(kind="no_done", rate=1.0, after_tokens=6))
    reply = await stream_chat(session, sim.url, MSGS)  # ends cleanly, no exception
    assert reply.status == 200
    assert reply.content_chunks == 6
    assert not reply.done and reply.finish_reason is None and reply.usage is None


async def test_slow_headers(make_sim: Any, session: aiohttp.ClientSession) -> None:
    sim = await make_sim(FaultRule(kind="slow_headers", rate=1.0, duration_s=40.0))
    t0 = time.perf_counter()
    async with session.post(sim.url + "/v1/chat/completions", json={"messages": MSGS}) as r:
        headers_after = time.perf_counter() - t0
        assert r.status == 200
        await r.read()
    assert headers_after >= 0.39


async def test_huge_chunk(make_sim: Any, session: aiohttp.ClientSession) -> None:
    sim = await make_sim(FaultRule(kind="huge_chunk", rate=1.0, after_tokens=2, size_bytes=300_000))
    async with session.post(
        sim.url + "/v1/chat/completions", json={"messages": MSGS, "stream": True}
    ) as r:
        raw = await r.read()
    lines = raw.split(b"\n\n")
    assert max(len(line) for line in lines) > 300_000
    assert sum(1 for line in lines if len(line) > 1000) == 1
    assert lines[-2] == b"data: [DONE]"


async def test_wrong_content_type(make_sim: Any, session: aiohttp.ClientSession) -> None:
    sim = await make_sim(FaultRule(kind="wrong_content_type", rate=1.0))
    async with session.post(
        sim.url + "/v1/chat/completions", json={"messages": MSGS, "stream": True}
    ) as r:
        assert r.status == 200
        assert r.content_type == "text/html"
        assert b"data:" not in await r.read()


async def test_hang_accepts_but_never_answers(
    make_sim: Any, session: aiohttp.ClientSession
) -> None:
    sim = await make_sim(FaultRule(kind="hang", on_requests=[1], duration_s=3600.0))
    with pytest.raises(asyncio.TimeoutError):
        async with asyncio.timeout(0.5):
            async with session.post(sim.url + "/v1/chat/completions", json={"messages": MSGS}):
                pass
    # The server itself is alive: the next request is answered.
    assert (await stream_chat(session, sim.url, MSGS)).done


async def test_restart_drops_connections_and_resets_state(
    make_sim: Any, session: aiohttp.ClientSession
) -> None:
    sim = await make_sim(FaultRule(kind="restart", on_requests=[3], duration_s=50.0))
    doc = [{"role": "user", "content": "[u1] " + "words " * 400}]
    await stream_chat(session, sim.url, doc)
    warm = await stream_chat(session, sim.url, doc)
    assert warm.usage is not None and warm.usage["prompt_tokens_details"]["cached_tokens"] > 0
    t0 = time.perf_counter()
    with pytest.raises(aiohttp.ClientError):
        await stream_chat(session, sim.url, doc)  # request 3 triggers the restart
    # Down for 50 simulated seconds = 0.5 s wall: connections are refused meanwhile.
    with pytest.raises(aiohttp.ClientConnectorError):
        await stream_chat(session, sim.url, doc)
    while True:
        try:
            after = await stream_chat(session, sim.url, doc)
            break
        except aiohttp.ClientConnectorError:
            await asyncio.sleep(0.02)
    assert time.perf_counter() - t0 >= 0.45
    assert sim.restarts == 1
    assert after.usage is not None
    assert after.usage["prompt_tokens_details"]["cached_tokens"] == 0  # cache wiped
    m = await get_metrics(session, sim.url)
    assert m["vllm:prompt_tokens_total"] == after.usage["prompt_tokens"]  # counters wiped


async def test_scheduled_restart_fires_by_time(
    make_sim: Any, session: aiohttp.ClientSession
) -> None:
    sim = await make_sim(FaultRule(kind="restart", at_seconds=[20.0], duration_s=30.0))
    await asyncio.sleep(0.25)  # 25 simulated seconds: the restart happened at 20
    assert sim.restarts == 1


async def test_faults_by_rate_are_reproducible(
    make_sim: Any, session: aiohttp.ClientSession
) -> None:
    async def pattern(seed: int) -> list[int]:
        sim = await make_sim(FaultRule(kind="http_500", rate=0.3), seed=seed)
        out = []
        for _ in range(30):
            async with session.post(
                sim.url + "/v1/chat/completions", json={"messages": MSGS, "max_tokens": 1}
            ) as r:
                out.append(r.status)
                await r.read()
        return out

    a, b, c = await pattern(1), await pattern(1), await pattern(2)
    assert a == b
    assert a != c
    assert 3 <= a.count(500) <= 18
