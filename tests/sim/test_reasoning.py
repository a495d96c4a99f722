"""Thinking tokens: the right field per dialect, the budget trap, and the off switch."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from stress.sim import SimConfig, start_sim
from tests.sim.helpers import stream_chat

MSGS = [{"role": "user", "content": "Why is the sky blue?"}]


def cfg(**kw: Any) -> SimConfig:
    base: dict[str, Any] = {"time_scale": 500.0, "reply_tokens_min": 20, "reply_tokens_max": 20}
    base.update({"reasoning_tokens": 50, **kw})
    return SimConfig.model_validate(base)


@pytest.mark.parametrize(
    ("dialect", "field"),
    [("vllm", "reasoning"), ("sglang", "reasoning_content"), ("llamacpp", "reasoning_content")],
)
async def test_reasoning_field_per_dialect(
    dialect: str, field: str, session: aiohttp.ClientSession
) -> None:
    sim = await start_sim(cfg(dialect=dialect))
    try:
        reply = await stream_chat(session, sim.url, MSGS)
    finally:
        await sim.close()
    deltas = [c["choices"][0]["delta"] for c in reply.chunks if c.get("choices")]
    fields = {k for d in deltas for k in d if k not in ("role", "content")}
    assert fields == {field}
    assert reply.reasoning_chunks == 50 and reply.content_chunks == 20
    # Thinking comes first, then the answer.
    kinds = [("r" if field in d else "c") for d in deltas if field in d or d.get("content")]
    assert kinds == ["r"] * 50 + ["c"] * 20
    assert reply.usage is not None and reply.usage["completion_tokens"] == 70


async def test_field_override(session: aiohttp.ClientSession) -> None:
    sim = await start_sim(cfg(dialect="vllm", reasoning_field="reasoning_content"))
    try:
        reply = await stream_chat(session, sim.url, MSGS)
    finally:
        await sim.close()
    assert any("reasoning_content" in c["choices"][0]["delta"] for c in reply.chunks[1:-1])


async def test_budget_spent_thinking_gives_empty_content_and_length(
    session: aiohttp.ClientSession,
) -> None:
    sim = await start_sim(cfg())
    try:
        reply = await stream_chat(session, sim.url, MSGS, max_tokens=30)
        async with session.post(
            sim.url + "/v1/chat/completions", json={"messages": MSGS, "max_tokens": 30}
        ) as r:
            whole = await r.json()
    finally:
        await sim.close()
    assert reply.content == "" and reply.reasoning_chunks == 30
    assert reply.finish_reason == "length"
    assert whole["choices"][0]["message"]["content"] is None
    assert whole["choices"][0]["message"]["reasoning"]
    assert whole["choices"][0]["finish_reason"] == "length"


async def test_enable_thinking_false_is_honoured(session: aiohttp.ClientSession) -> None:
    sim = await start_sim(cfg())
    off = {"chat_template_kwargs": {"enable_thinking": False}}
    try:
        reply = await stream_chat(session, sim.url, MSGS, **off)
    finally:
        await sim.close()
    assert reply.reasoning_chunks == 0 and reply.content_chunks == 20
    sim = await start_sim(cfg(honor_enable_thinking=False))
    try:
        ignored = await stream_chat(session, sim.url, MSGS, **off)
    finally:
        await sim.close()
    assert ignored.reasoning_chunks == 50
