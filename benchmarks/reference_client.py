"""The reference loop of ``e2e.py``: a plain aiohttp + orjson + uvloop streaming client.

What someone writes in an afternoon, and what ``stress run`` is compared against: no stress
code, no tuning beyond a connection limit as large as the streams (aiohttp's default of 100
would cap the larger levels). ``--streams`` tasks each POST the same request body in a
closed loop (no pause) for ``--duration`` seconds; each reply is read line by line
(``async for line in resp.content``, aiohttp's documented way), every ``data:`` line but
``[DONE]`` is parsed with ``orjson.loads`` and its ``choices[0].delta.content`` kept, as a
client that shows or checks the text must. The reply is always read to its end, so the
connection goes back to the pool.

It measures nothing itself: it writes one record per finished request (wall-clock start and
end, JSON chunks parsed, ok) to ``--out`` when it stops, and ``e2e.py`` counts them and
samples this process's CPU from outside, exactly as it does for ``stress run``.

    python benchmarks/reference_client.py URL BODY_FILE --streams 64 --duration 8 --out rec.json
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

import aiohttp
import orjson
import uvloop


async def run(url: str, body: bytes, streams: int, duration: float) -> list[list[float]]:
    done: list[list[float]] = []
    stop = time.time() + duration
    headers = {"Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=streams)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def loop() -> None:
            while time.time() < stop:
                t0 = time.time()
                chunks, ok, parts = 0, 0.0, []
                try:
                    async with session.post(url, data=body, headers=headers) as resp:
                        async for line in resp.content:
                            if not line.startswith(b"data:"):
                                continue
                            data = line[5:].strip()
                            if data == b"[DONE]":
                                ok = 1.0 if resp.status == 200 else 0.0
                                continue
                            obj = orjson.loads(data)
                            chunks += 1
                            choices = obj.get("choices")
                            if choices:
                                content = choices[0].get("delta", {}).get("content")
                                if content:
                                    parts.append(content)
                except (aiohttp.ClientError, TimeoutError, ValueError):
                    ok = 0.0
                "".join(parts)
                done.append([t0, time.time(), float(chunks), ok])

        await asyncio.gather(*(loop() for _ in range(streams)))
    return done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("url", help="server root; the client posts to URL/v1/chat/completions")
    ap.add_argument("body", type=Path, help="file holding the JSON request body")
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    url = args.url.rstrip("/") + "/v1/chat/completions"
    done = uvloop.run(run(url, args.body.read_bytes(), args.streams, args.duration))
    args.out.write_bytes(orjson.dumps(done))


if __name__ == "__main__":
    main()
