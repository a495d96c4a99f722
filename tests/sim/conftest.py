"""Fixtures for the simulator tests: a client session and a fast simulator."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from stress.sim import RunningSim, SimConfig, start_sim


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    conn = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(connector=conn) as s:
        yield s


@pytest.fixture
async def fast_sim() -> AsyncIterator[RunningSim]:
    sim = await start_sim(SimConfig(time_scale=200.0, reply_tokens_min=8, reply_tokens_max=24))
    try:
        yield sim
    finally:
        await sim.close()
