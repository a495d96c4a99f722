"""``benchmarks/paced_server.py``'s two clocks, through its real process on loopback.

``e2e.py``'s paced figures stand on where the server puts each stream's chunks: with the
``step`` clock every stream's chunks fall on one grid of decode steps, whatever the client
does; with the ``stream`` clock each stream is paced from its own arrival. The server's log
says when each first chunk was meant to go out (``t_intended``); a float on the grid is an
exact multiple of the step from the others, so nothing here depends on the machine's speed.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import orjson
import pytest

from benchmarks._common import paced_server

pytestmark = pytest.mark.slow

FIRST_MS, STEP_S, CHUNKS = 5.0, 0.010, 4


async def _streams(url: str, n: int) -> list[list[bytes]]:
    """``n`` requests started a few ms apart; each reply's ``data:`` payloads."""

    async def one(i: int) -> list[bytes]:
        await asyncio.sleep(0.003 * i)
        bench = {"id": f"r{i}", "first_ms": FIRST_MS, "chunks": CHUNKS, "gap_ms": 7.0}
        body = {"model": "m", "messages": [], "stream": True, "bench": bench}
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{url}/v1/chat/completions", json=body) as resp,
        ):
            assert resp.status == 200
            raw = await resp.read()
        return [line[6:] for line in raw.split(b"\n") if line.startswith(b"data: ")]

    return await asyncio.gather(*(one(i) for i in range(n)))


def _run(clock: str, tmp_path: Path) -> tuple[list[list[bytes]], list[dict[str, float]]]:
    with paced_server(None, log_dir=tmp_path, clock=clock) as (url, log):
        replies = asyncio.run(_streams(url, 3))
    firsts = [orjson.loads(line) for line in log.read_bytes().splitlines()]
    return replies, firsts


def _check_replies(replies: list[list[bytes]]) -> None:
    for events in replies:
        assert events[-1] == b"[DONE]"
        chunks = [orjson.loads(e) for e in events[:-1]]
        assert sum(1 for c in chunks if c["choices"]) == CHUNKS
        assert chunks[-1]["usage"]["completion_tokens"] == CHUNKS


def test_step_clock_puts_every_streams_first_chunk_on_one_grid(tmp_path: Path) -> None:
    replies, firsts = _run("step", tmp_path)
    _check_replies(replies)
    assert len(firsts) == 3
    base = firsts[0]["t_intended"]
    for f in firsts:
        due = f["t_recv"] + FIRST_MS / 1000
        assert due - 1e-9 <= f["t_intended"] < due + STEP_S  # the first step at or after
        steps = (f["t_intended"] - base) / STEP_S
        assert abs(steps - round(steps)) < 1e-6, firsts


def test_stream_clock_paces_each_stream_from_its_arrival(tmp_path: Path) -> None:
    replies, firsts = _run("stream", tmp_path)
    _check_replies(replies)
    assert len(firsts) == 3
    for f in firsts:
        assert f["t_intended"] == pytest.approx(f["t_recv"] + FIRST_MS / 1000, abs=1e-9)
