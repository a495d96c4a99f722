"""The client's hang watch counts silence on every stream only while requests are in
flight, across requests: a server frozen longer than ``hang_after`` is seen even when each
of its requests times out sooner and users send again (issue 35: a 60 s freeze showed 94 s
without a chunk on any stream and only the server's late detection)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from stress.config.scenario import load_scenario
from stress.runtime.background import ClientHangWatch
from stress.runtime.run import execute
from tests.fakes import DONE, FakeServer, chunk, serve, usage_chunk

FIRST_TOKEN_S = 1.0
HANG_AFTER_S = 2.5  # longer than a request lives while the server is frozen
FREEZE_S = 7.0
DURATION_S = 1.5 + FREEZE_S + 2.5


def test_busy_silence_adds_up_across_requests_and_idle_gaps_do_not_count() -> None:
    w = ClientHangWatch(seen=0.0, prev=0.0)
    said = []
    # requests of 1 s that get nothing, 0.5 s of thinking between them
    for t, in_flight in [(1.0, 1), (1.5, 0), (2.5, 1), (3.0, 0), (4.0, 1), (4.5, 1)]:
        if (e := w.tick(t, 0.0, in_flight, HANG_AFTER_S)) is not None:
            said.append((t, e.kind))
    assert said == [(4.0, "hang_suspected")]  # 1 + 1 + 1 s in flight, the gaps left out
    assert w.tick(5.0, 4.8, 1, HANG_AFTER_S).kind == "hang_cleared"  # type: ignore[union-attr]
    assert w.tick(6.0, 4.8, 0, HANG_AFTER_S) is None and w.silent_s < HANG_AFTER_S


class Frozen:
    """Answers 20 chunks, or, while frozen, nothing at all (no status line, no header: a
    stopped process whose kernel still accepts connections)."""

    def __init__(self) -> None:
        self.thawed = asyncio.Event()
        self.thawed.set()

    async def chat(self, request: web.Request, body: dict[str, Any], n: int) -> web.StreamResponse:
        await self.thawed.wait()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(20):
            await asyncio.sleep(0.01)
            await resp.write(chunk(f" w{i}", finish="stop" if i == 19 else None))
        await resp.write(usage_chunk(50, 20) + DONE)
        await resp.write_eof()
        return resp

    async def freeze(self, fake: FakeServer) -> None:
        while len(fake.requests) < 2:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        self.thawed.clear()
        await asyncio.sleep(FREEZE_S)
        self.thawed.set()


async def test_a_freeze_whose_requests_time_out_is_one_client_hang(tmp_path: Path) -> None:
    f = Frozen()
    p = tmp_path / "s.yaml"
    async with serve(FakeServer(script=f.chat)) as srv:
        p.write_text(f"""\
name: frozen
target: {{url: "{srv.url}", model: fake-model}}
users: {{count: 1, think_time: {{min: 0.3s, max: 0.4s}}}}
duration: {DURATION_S}s
conversation:
  turn: {{ask: ["Hi."]}}
request: {{max_tokens: 20}}
timeouts: {{first_token: {FIRST_TOKEN_S}s, drain: 2s}}
telemetry: {{hang_after: {HANG_AFTER_S}s, server_metrics: false, gpus: "off"}}
""")
        freezer = asyncio.create_task(f.freeze(srv))
        outcome = await asyncio.wait_for(execute(load_scenario(p), tmp_path / "out"), 60)
        await freezer
    events = [orjson.loads(x) for x in (outcome.run_dir / "events.jsonl").read_bytes().splitlines()]
    hang = [(e["kind"], e["source"]) for e in events if e["kind"].startswith("hang")]
    assert hang == [("hang_suspected", "client"), ("hang_cleared", "client")], hang
    records = [
        orjson.loads(x) for x in (outcome.run_dir / "requests.jsonl").read_bytes().splitlines()
    ]
    assert sum(r["error_class"] == "first_token_timeout" for r in records) >= 3
