"""The HTTP face of the simulator: an OpenAI-compatible aiohttp server.

Handlers turn a chat request into token ids (``prompt.py``), plan the reply (``filler.py``),
hand it to the engine (``scheduler.py``) and stream what the engine emits, in the chosen
server's shapes (``dialects.py``). Injected faults (``faults.py``) are produced here, on the
wire, because that is where a client sees them. Each request leaves a ground-truth record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
import socket
import struct
import time
import uuid
from typing import Any

import orjson
from aiohttp import web

from stress.config.sim import FaultRule, SimConfig
from stress.sim import dialects
from stress.sim.faults import MID_STREAM, FaultPlan
from stress.sim.filler import make_reply
from stress.sim.gpus import SimGpus
from stress.sim.groundtruth import GroundTruth, GroundTruthRecord
from stress.sim.prompt import PromptTokenizer
from stress.sim.scheduler import DONE, END, Engine, Seq

_NEVER = 10**9
# Seconds that closing the simulator waits for handlers after their connections are dropped.
_SHUTDOWN_S = 0.5
# The in-process simulator's HTTP layer logs here, and nowhere: a fault or a client that
# hangs up is told on the wire, never as a traceback in the terminal of ``stress run``.
_QUIET_LOG = logging.getLogger("stress.sim.http")
_QUIET_LOG.addHandler(logging.NullHandler())
_QUIET_LOG.propagate = False
# An X-Request-ID the vLLM dialect takes as its request id, as vLLM does (chatcmpl-<id>);
# anything else (odd characters, very long) gets a random id.
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:#-]{1,200}")


class RunningSim:
    """A started simulator. ``url`` is the server root (no ``/v1``)."""

    def __init__(self, config: SimConfig, host: str, quiet: bool = True) -> None:
        self.config = config
        self.host = host
        self.quiet = quiet
        self.port = 0
        self.engine = Engine(config)
        self.ground_truth = GroundTruth(config.ground_truth_path)
        self.faults = FaultPlan(config.faults, config.seed)
        self.gpus = SimGpus(config.gpus, config.seed)
        self.restarts = 0
        self._prompter = PromptTokenizer()
        self._requests = 0
        self._created = int(time.time())
        self._start_unix = time.time()
        self._down = False
        self._active: dict[int, web.Request] = {}
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._bg: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # --- lifecycle ---------------------------------------------------------------------
    async def _start(self, port: int) -> None:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        r = app.router
        r.add_get("/v1/models", self._models)
        r.add_post("/v1/chat/completions", self._chat)
        r.add_get("/health", self._health)
        r.add_get("/v1/health", self._health)
        r.add_get("/metrics", self._metrics)
        r.add_get("/sim/gpus", self._gpus)  # simulated cards (stress.sim.gpus); [] when none
        if self.config.dialect == "vllm":
            r.add_get("/version", self._version)
        elif self.config.dialect == "sglang":
            r.add_get("/server_info", self._server_info)
            r.add_get("/get_server_info", self._server_info)
        else:
            r.add_get("/props", self._props)
            r.add_get("/slots", self._slots)
        extra: dict[str, Any] = {"logger": _QUIET_LOG} if self.quiet else {}
        self._runner = web.AppRunner(
            app,
            handler_cancellation=True,
            access_log=None,
            shutdown_timeout=_SHUTDOWN_S,
            **extra,
        )
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, self.host, port)
        await self._site.start()
        server = self._site._server
        sockets = getattr(server, "sockets", None)  # asyncio.Server or uvloop's Server
        assert sockets, "the simulator's listening socket is missing"
        self.port = sockets[0].getsockname()[1]
        self.engine.start()
        for at, rule in self.faults.timed_restarts():
            self._spawn(self._restart_at(at, rule))

    async def close(self) -> None:
        """Stop promptly, streams in flight included: drop their connections, then clean up."""
        if self._site is not None:
            await self._site.stop()
            self._site = None
        for req in list(self._active.values()):
            _reset_transport(req)
        for task in list(self._bg):
            task.cancel()
        for task in list(self._bg):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.engine.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self.ground_truth.close()

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    def _wall(self, sim_seconds: float) -> float:
        return sim_seconds / self.config.time_scale

    # --- restart fault -----------------------------------------------------------------
    async def _restart_at(self, at: float, rule: FaultRule) -> None:
        await asyncio.sleep(max(0.0, self._wall(at - self.engine.sim_now())))
        await self.restart(rule.duration_s)

    async def restart(self, downtime_s: float) -> None:
        """Drop every connection, wipe cache and counters, refuse connections for a while."""
        if self._down or self._runner is None:
            return
        self._down = True
        self.restarts += 1
        if self._site is not None:
            await self._site.stop()
            self._site = None
        self.engine.reset()
        for req in list(self._active.values()):
            _reset_transport(req)
        server = self._runner.server
        if server is not None:
            for proto in list(server.connections):
                if proto.transport is not None:
                    proto.transport.abort()
        await asyncio.sleep(self._wall(downtime_s))
        self._site = web.TCPSite(self._runner, self.host, self.port)
        await self._site.start()
        self._down = False

    # --- simple endpoints --------------------------------------------------------------
    async def _models(self, request: web.Request) -> web.Response:
        return _json(dialects.models_body(self.config, self._created))

    async def _health(self, request: web.Request) -> web.Response:
        body = dialects.health_body(self.config)
        ctype = "application/json" if body else "text/plain"
        return web.Response(body=body, content_type=ctype)

    async def _version(self, request: web.Request) -> web.Response:
        return _json({"version": dialects.VERSION["vllm"]})

    async def _server_info(self, request: web.Request) -> web.Response:
        st = self.engine.stats
        thr = st.generation_tokens / st.decode_seconds if st.decode_seconds else 0.0
        return _json(
            {
                "model_path": self.config.model,
                "version": dialects.VERSION["sglang"],
                "max_total_num_tokens": self.engine.pool.num_blocks * self.config.block_size,
                "context_length": self.config.context_limit,
                "internal_states": [{"last_gen_throughput": thr, "avg_spec_accept_length": None}],
            }
        )

    async def _props(self, request: web.Request) -> web.Response:
        return _json(dialects.props_body(self.config))

    async def _slots(self, request: web.Request) -> web.Response:
        if (
            request.query.get("fail_on_no_slot")
            and len(self.engine.running) >= self.config.max_seqs
        ):
            body = dialects.error_body(self.config, 503, "no slot available", "unavailable_error")
            return _json(body, status=503)
        return _json(dialects.slots_body(self.config, self.engine))

    async def _gpus(self, request: web.Request) -> web.Response:
        return _json(self.gpus.reading(self.engine))

    async def _metrics(self, request: web.Request) -> web.Response:
        text = dialects.metrics_text(self.config, self.engine, self._start_unix)
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    # --- chat --------------------------------------------------------------------------
    async def _chat(self, request: web.Request) -> web.StreamResponse:
        received_at = time.time()
        t0 = time.perf_counter()
        self._requests += 1
        request_no = self._requests
        fault = self.faults.draw(request_no, self.engine.sim_now())
        self._active[id(request)] = request
        try:
            return await self._chat_inner(request, request_no, fault, received_at, t0)
        except ConnectionResetError:
            # The client hung up mid-reply (or a fault dropped it): no one is left to answer.
            raise asyncio.CancelledError from None
        finally:
            self._active.pop(id(request), None)

    async def _chat_inner(
        self,
        request: web.Request,
        request_no: int,
        fault: FaultRule | None,
        received_at: float,
        t0: float,
    ) -> web.StreamResponse:
        cfg = self.config
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return _error(cfg, 400, "request body is not valid JSON", "BadRequestError")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(cfg, 400, "'messages' must be a list", "BadRequestError")
        if not body["messages"]:
            return _error(cfg, 400, "'messages' must not be empty", "BadRequestError")
        kind = fault.kind if fault is not None else None
        if fault is not None and kind not in MID_STREAM:
            early = await self._early_fault(request, fault)
            if early is not None:
                return early
        prompt_ids = self._prompter.render(body["messages"])
        prompt_len = len(prompt_ids)
        limit = cfg.context_limit
        if prompt_len >= limit:
            return _json(dialects.context_error(cfg, prompt_len, limit), status=400)
        plan = self._plan_reply(body, request_no, limit - prompt_len)
        header_id = request.headers.get("X-Request-ID")
        if cfg.dialect != "vllm":
            rid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        elif header_id is not None and _REQUEST_ID.fullmatch(header_id):
            rid = f"chatcmpl-{header_id}"  # vLLM's request id is the header's
        else:
            rid = f"chatcmpl-{uuid.uuid4().hex[:16]}"
        seq = self.engine.submit(rid, prompt_ids + plan.ids, prompt_len, plan.n_out, plan.finish)
        stream = bool(body.get("stream"))
        opts = body.get("stream_options")
        include_usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
        writer = _Writer(self, request, seq, plan, rid, fault, received_at, t0, request_no)
        writer.request_id = header_id
        try:
            if stream:
                return await writer.stream(include_usage)
            return await writer.whole()
        finally:
            if seq.state != DONE:
                self.engine.abort(seq)
            writer.record(stream)

    async def _early_fault(
        self, request: web.Request, fault: FaultRule
    ) -> web.StreamResponse | None:
        cfg = self.config
        kind = fault.kind
        if kind == "http_500":
            return _error(cfg, 500, "simulated internal server error", "InternalServerError")
        if kind == "http_503":
            return _error(cfg, 503, "simulated: service unavailable", "unavailable_error")
        if kind == "http_429":
            resp = _error(cfg, 429, "simulated: rate limit exceeded", "RateLimitError")
            resp.headers["Retry-After"] = str(fault.retry_after_s)
            return resp
        if kind == "wrong_content_type":
            return web.Response(
                body=b"<html><body><h1>502 Bad Gateway</h1></body></html>",
                content_type="text/html",
            )
        if kind == "pause":
            self.engine.pause(fault.duration_s)  # then this request is served as usual
            return None
        if kind == "hang":
            await asyncio.sleep(self._wall(fault.duration_s) if fault.duration_s else _NEVER)
            _reset_transport(request)
            raise asyncio.CancelledError
        if kind == "restart":
            self._spawn(self.restart(fault.duration_s))
            await asyncio.sleep(_NEVER)  # the restart aborts this connection
        if kind == "slow_headers":
            await asyncio.sleep(self._wall(fault.duration_s))
        return None

    def _plan_reply(self, body: dict[str, Any], request_no: int, room: int) -> _Plan:
        cfg = self.config
        rng = random.Random(cfg.seed * 1_000_003 + request_no)
        natural = rng.randint(cfg.reply_tokens_min, cfg.reply_tokens_max)
        thinking = cfg.reasoning_tokens > 0
        if thinking and cfg.honor_enable_thinking:
            kwargs = body.get("chat_template_kwargs")
            if isinstance(kwargs, dict) and kwargs.get("enable_thinking") is False:
                thinking = False
            if body.get("reasoning_effort") == "none":
                thinking = False
        n_reason = cfg.reasoning_tokens if thinking else 0
        planned = n_reason + natural
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        cap = room
        if isinstance(max_tokens, int) and max_tokens > 0:
            cap = min(cap, max_tokens)
            if body.get("ignore_eos"):
                planned = max_tokens
        n_out = min(planned, cap)
        finish = "length" if n_out < planned or body.get("ignore_eos") else "stop"
        r_n = min(n_reason, n_out)
        r_pieces, r_ids = make_reply(rng, r_n, thinking=True) if r_n else ([], [])
        c_pieces, c_ids = make_reply(rng, n_out - r_n) if n_out > r_n else ([], [])
        return _Plan(r_pieces + c_pieces, r_ids + c_ids, r_n, n_out, finish)


class _Plan:
    __slots__ = ("finish", "ids", "n_out", "n_reason", "pieces")

    def __init__(
        self, pieces: list[str], ids: list[int], n_reason: int, n_out: int, finish: str
    ) -> None:
        self.pieces = pieces
        self.ids = ids
        self.n_reason = n_reason
        self.n_out = n_out
        self.finish = finish


class _Writer:
    """Writes one reply (streamed or whole), applying a mid-stream fault if one is due."""

    def __init__(
        self,
        sim: RunningSim,
        request: web.Request,
        seq: Seq,
        plan: _Plan,
        rid: str,
        fault: FaultRule | None,
        received_at: float,
        t0: float,
        request_no: int,
    ) -> None:
        self.sim = sim
        self.cfg = sim.config
        self.request = request
        self.seq = seq
        self.plan = plan
        self.rid = rid
        self.fault = fault if fault is not None and fault.kind in MID_STREAM else None
        self.received_at = received_at
        self.t0 = t0
        self.request_no = request_no
        self.sent = 0
        self.first_at: float | None = None
        self.first_pc: float | None = None
        self.last_at: float | None = None
        self.status = 200
        self.finished: str | None = None
        self.request_id: str | None = None
        """The request's X-Request-ID header, as received (ground truth)."""

    async def _next_count(self) -> tuple[int, bool]:
        """Wait for the engine: (tokens emitted so far, whether the sequence ended)."""
        q = self.seq.queue
        item = await q.get()
        ended = item == END
        while not q.empty():
            if q.get_nowait() == END:
                ended = True
        return self.seq.emitted, ended

    async def stream(self, include_usage: bool) -> web.StreamResponse:
        cfg = self.cfg
        created = int(time.time())
        tpl = dialects.ChunkTemplates(cfg, self.rid, created)
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(self.request)
        await resp.write(dialects.first_chunk(cfg, self.rid, created))
        pieces = self.plan.pieces
        n_reason = self.plan.n_reason
        n_out = self.plan.n_out
        fault = self.fault
        fault_at = fault.after_tokens if fault is not None else _NEVER
        finish = self.plan.finish
        while True:
            upto, ended = await self._next_count()
            if ended and upto < n_out:
                _reset_transport(self.request)  # aborted by a restart
                return resp
            while self.sent < upto:
                if self.sent == fault_at and fault is not None:
                    if await self._mid_fault(resp, fault, tpl):
                        return resp
                    fault_at = _NEVER
                stop = min(upto, fault_at) if fault_at > self.sent else upto
                buf = bytearray()
                for i in range(self.sent, stop):
                    left, right = tpl.reasoning if i < n_reason else tpl.content
                    if i == n_out - 1 and cfg.dialect != "llamacpp":
                        last = tpl.reasoning_last if i < n_reason else tpl.content_last
                        left, right = last[finish]
                    buf += left
                    buf += pieces[i].encode()
                    buf += right
                await resp.write(bytes(buf))
                self._stamp(stop - self.sent)
            if self.sent == fault_at and fault is not None and not ended:
                if await self._mid_fault(resp, fault, tpl):
                    return resp
                fault_at = _NEVER
            if ended:
                break
        if cfg.dialect == "llamacpp":
            await resp.write(dialects.sse(dialects.chunk_dict(cfg, self.rid, created, {}, finish)))
        if include_usage:
            await resp.write(
                dialects.usage_chunk(cfg, self.rid, created, self.seq, n_out, n_reason)
            )
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        self.finished = finish
        return resp

    def _stamp(self, n: int) -> None:
        now = time.time()
        if self.first_at is None:
            self.first_at = now
            self.first_pc = time.perf_counter()
        self.last_at = now
        self.sent += n

    async def _mid_fault(
        self, resp: web.StreamResponse, fault: FaultRule, tpl: dialects.ChunkTemplates
    ) -> bool:
        """Produce a mid-stream fault; True when the response is over."""
        kind = fault.kind
        if kind == "reset":
            _reset_transport(self.request)
            return True
        if kind == "stall":
            await asyncio.sleep(self.sim._wall(fault.duration_s))
            return False
        if kind == "malformed_chunk":
            await resp.write(
                b'data: {"id":"' + self.rid.encode() + b'","choices":[{"delta":{"con\n\n'
            )
            return False
        if kind == "no_done":
            await resp.write_eof()
            return True
        if kind == "huge_chunk":
            left, right = tpl.content
            await resp.write(left + b"x" * fault.size_bytes + right)
            return False
        return False

    async def whole(self) -> web.StreamResponse:
        cfg = self.cfg
        fault = self.fault
        while True:
            _upto, ended = await self._next_count()
            if ended:
                break
        if self.seq.emitted < self.plan.n_out:
            _reset_transport(self.request)
            raise asyncio.CancelledError
        if fault is not None:
            if fault.kind == "reset":
                _reset_transport(self.request)
                raise asyncio.CancelledError
            if fault.kind == "stall":
                await asyncio.sleep(self.sim._wall(fault.duration_s))
        n_out = self.plan.n_out
        n_reason = self.plan.n_reason
        pieces = self.plan.pieces
        content = "".join(pieces[n_reason:]) if n_out > n_reason else None
        if fault is not None and fault.kind == "huge_chunk":
            content = (content or "") + "x" * fault.size_bytes
        reasoning = "".join(pieces[:n_reason]) if n_reason else None
        body = dialects.completion_body(
            cfg, self.rid, int(time.time()), self.seq, content, reasoning,
            self.plan.finish, n_out, n_reason,
        )  # fmt: skip
        raw = orjson.dumps(body)
        if fault is not None and fault.kind == "malformed_chunk":
            raw = raw[: len(raw) // 2]
        self._stamp(n_out)
        if fault is not None and fault.kind == "no_done":
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            await resp.prepare(self.request)
            await resp.write(raw[: len(raw) // 2])
            await resp.write_eof()
            return resp
        self.finished = self.plan.finish
        return web.Response(body=raw, content_type="application/json")

    def record(self, stream: bool) -> None:
        seq = self.seq
        sim_ttft = None if seq.t_first is None else seq.t_first - seq.t_arrival
        sim_e2e = None if seq.t_last is None else seq.t_last - seq.t_arrival
        end = time.perf_counter()
        self.sim.ground_truth.add(
            GroundTruthRecord(
                id=self.rid,
                request_no=self.request_no,
                received_at=self.received_at,
                first_token_at=self.first_at,
                last_token_at=self.last_at,
                ttft_s=None if self.first_pc is None else self.first_pc - self.t0,
                e2e_s=end - self.t0,
                sim_ttft_s=sim_ttft,
                sim_e2e_s=sim_e2e,
                prompt_tokens=seq.prompt_len,
                cached_tokens=seq.cached_tokens or 0,
                completion_tokens=self.plan.n_out,
                reasoning_tokens=self.plan.n_reason,
                tokens_sent=self.sent,
                finish_reason=self.finished,
                preemptions=seq.preemptions,
                stream=stream,
                status=self.status,
                fault=None if self.fault is None else self.fault.kind,
                request_id=self.request_id,
            )
        )


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")


def _error(cfg: SimConfig, status: int, message: str, kind: str) -> web.Response:
    return _json(dialects.error_body(cfg, status, message, kind), status=status)


def _reset_transport(request: web.Request) -> None:
    """Close the connection with a TCP RST (what a crashed or killed server looks like)."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


async def start_sim(
    config: SimConfig, host: str = "127.0.0.1", port: int = 0, *, quiet: bool = True
) -> RunningSim:
    """Start the simulator in the running event loop; ``port=0`` picks a free port.

    ``quiet`` (the default, for the simulator inside ``stress run``) keeps aiohttp's
    request-error log out of the terminal; the standalone ``stress sim`` shows it.
    """
    sim = RunningSim(config, host, quiet)
    await sim._start(port)
    return sim
