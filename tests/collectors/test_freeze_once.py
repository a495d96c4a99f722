"""One freeze, one hang (issue 35): a server frozen like SIGSTOP is seen by the client's
watch while frozen and by the server collector only after it resumes; the run counts one
hang, first detected by the client. Its health checks time out meanwhile (``server_down``):
that is the same freeze, not also an outage. The real engine, client, collectors and gate
run against a loopback llama.cpp-like server that freezes on cue."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from stress.config.scenario import load_scenario
from stress.runtime.run import execute
from tests.fakes import DONE, FakeServer, chunk, serve, usage_chunk

HANG_AFTER_S = 1.5
FREEZE_S = 3 * HANG_AFTER_S  # long enough for the client's watch (1 s ticks) to fire
HEALTH_LAG_S = 2.0  # after the thaw: /health still silent, the client's watch has cleared
COUNTERS_LAG_S = 3.0  # and /metrics shows no progress yet: the collector sees the freeze
SETTLE_S = COUNTERS_LAG_S + 3.0
DURATION_S = 1.5 + FREEZE_S + SETTLE_S


class Freezable:
    """Streams 30 chunks a request; counts decodes like llama.cpp's ``n_decode_total``."""

    def __init__(self) -> None:
        self.thawed = asyncio.Event()
        self.thawed.set()
        self.decoded = 0
        self.shown = 0  # the counter /metrics shows
        self.busy = 0
        self.health_at = 0.0
        self.counters_at = 0.0

    async def chat(self, request: web.Request, body: dict[str, Any], n: int) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        self.busy += 1
        try:
            await resp.prepare(request)
            for i in range(30):
                await self.thawed.wait()
                await asyncio.sleep(0.02)
                self.decoded += 1
                await resp.write(chunk(f" w{i}", finish="stop" if i == 29 else None))
            await resp.write(usage_chunk(100, 30) + DONE)
            await resp.write_eof()
        finally:
            self.busy -= 1
        return resp

    async def health(self, request: web.Request) -> web.Response:
        await self.thawed.wait()
        await asyncio.sleep(max(0.0, self.health_at - time.perf_counter()))
        return web.json_response({"status": "ok"})

    async def metrics(self, request: web.Request) -> web.Response:
        await self.thawed.wait()
        if time.perf_counter() >= self.counters_at:
            self.shown = self.decoded
        text = (
            f"llamacpp:n_decode_total {self.shown}\nllamacpp:tokens_predicted_total {self.shown}\n"
            f"llamacpp:requests_processing {self.busy}\nllamacpp:requests_deferred 0\n"
        )
        return web.Response(text=text)

    async def freeze(self, fake: FakeServer) -> None:
        while len(fake.requests) < 3:
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)
        self.thawed.clear()
        await asyncio.sleep(FREEZE_S)
        now = time.perf_counter()
        self.health_at, self.counters_at = now + HEALTH_LAG_S, now + COUNTERS_LAG_S
        self.thawed.set()


def scenario(tmp_path: Path, url: str) -> Any:
    p = tmp_path / "s.yaml"
    p.write_text(f"""\
name: freeze_once
target: {{url: "{url}", server: llamacpp, model: fake-model}}
users: {{count: 3, ramp_up: 0.3s, think_time: {{min: 0.05s, max: 0.1s}}}}
duration: {DURATION_S}s
conversation:
  turn: {{ask: ["Hi."]}}
request: {{max_tokens: 30}}
timeouts: {{drain: 2s}}
telemetry: {{interval: 0.25s, hang_after: {HANG_AFTER_S}s, gpus: "off"}}
""")
    return load_scenario(p)


async def test_a_freeze_seen_late_by_the_server_is_one_hang(tmp_path: Path) -> None:
    f = Freezable()
    fake = FakeServer(script=f.chat)
    app = fake.app()
    app.router.add_get("/health", f.health)
    app.router.add_get("/metrics", f.metrics)
    fake.app = lambda: app  # type: ignore[method-assign]
    async with serve(fake) as srv:
        freezer = asyncio.create_task(f.freeze(srv))
        outcome = await asyncio.wait_for(
            execute(scenario(tmp_path, srv.url), tmp_path / "out"), DURATION_S + 30
        )
        await freezer
    run = outcome.run_dir
    events = [orjson.loads(x) for x in (run / "events.jsonl").read_bytes().splitlines()]
    hang = [(e["kind"], e["source"]) for e in events if e["kind"].startswith("hang")]
    suspected = [e for e in events if e["kind"] == "hang_suspected"]
    assert [(e["kind"], e["source"]) for e in suspected] == [("hang_suspected", "client")], hang
    late = [e for e in events if e["kind"] == "hang_corroborated" and e["source"] == "server"]
    assert late and late[0]["data"]["late"] is True, hang  # the server saw it after the clear
    summary = orjson.loads((run / "summary.json").read_bytes())
    assert summary["hangs"]["count"] == 1
    first = summary["hangs"]["hangs"][0]
    assert first["first_detected_s"] == round(suspected[0]["t"], 3)
    assert first["seen_by"] == ["client", "server"]
    assert ", 1 hangs," in summary["verdict"]["summary"]
    # the timed-out health checks are the freeze: the hang says so, no outage is counted
    down = [e for e in events if e["kind"] == "server_down"]
    assert down and down[0]["data"]["reason"] == "timeout", hang
    assert [e["kind"] for e in events].count("server_frozen") == 1
    assert [f["code"] for f in summary["verdict"]["findings"] if f["level"] == "FAIL"] == ["hangs"]
    assert first["health_silent_s"] > 0
    line = next(i for i in summary["verdict"]["items"] if "suspected hangs" in i)
    assert "stopped answering its health checks" in line and "server down 0 times" in line
