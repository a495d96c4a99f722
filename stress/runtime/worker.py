"""One worker process of a ``--workers N`` run: a shard of the users on its own event loop.

``python -m stress.runtime.worker`` is started by the run's parent (``stress.runtime.pool``)
with three pipes: the parent's frames come on stdin, this process's on stdout
(``stress.store.wire``), stderr is kept by the parent for the ``worker_died`` event. The
worker builds its own client (its own connection pool), tokenizer, corpus and ``Engine``
for users u with u % N == k, on the parent's run clock (``t0_ns``: ``perf_counter`` is
CLOCK_MONOTONIC on Linux, one clock for every process of the machine). It owns no file:
every request start, record, event, user state and health sample goes to the parent, which
records and shows them.

A request's start notice is written to the pipe (a blocking write) before the request is
sent, so a worker killed at any instant leaves the parent knowing every request the
server could have seen. The rest is batched and written every ``TICK_S`` or when a batch
fills. The worker ignores SIGINT and SIGTERM (a terminal's Ctrl-C reaches the whole
process group): the parent decides and forwards ``stop`` and ``cancel``. When the parent
goes away (stdin ends) the worker cancels what it has in flight and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import os
import select
import signal
import socket
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import Any

from stress.collectors.base import RunClock
from stress.collectors.client import ClientHealthCollector
from stress.config.scenario import Scenario
from stress.core.events import RunEvent
from stress.core.record import RequestRecord
from stress.core.secrets import REDACTOR, redact_auth_header
from stress.core.tokens import get_tokenizer
from stress.load.corpus import Corpus
from stress.load.engine import Engine, RunCounters
from stress.net.client import ChatClient
from stress.net.deadlines import TimeoutPolicy
from stress.store.wire import frame, pack_times, read_frame

TICK_S = 0.05
"""Seconds between batches (in-flight progress, health, records, events)."""
MAX_BATCH = 256
"""Messages in a batch that is written at once, before the tick."""
PIPE_BYTES = 1 << 20
"""Pipe buffer asked for (Linux ``F_SETPIPE_SZ``): room for a second of records."""
_F_SETPIPE_SZ = 1031


class Outbox:
    """Messages to the parent, batched into frames; writes block (the parent's pace is the
    worker's: a parent behind shows as this worker's loop lag, never as a lost record)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.batch: list[Any] = []
        self.broken = False
        with contextlib.suppress(OSError):  # a pipe; a socket (Ray) has its own buffer
            fcntl.fcntl(fd, _F_SETPIPE_SZ, PIPE_BYTES)

    def put(self, msg: list[Any]) -> None:
        self.batch.append(msg)
        if len(self.batch) >= MAX_BATCH:
            self.flush()

    def flush(self) -> None:
        if not self.batch:
            return
        batch, self.batch = self.batch, []
        if self.broken:
            return
        view = memoryview(_scrubbed_frame(batch))
        try:
            while view:
                try:
                    view = view[os.write(self.fd, view) :]
                except BlockingIOError:  # a socket the event loop made non-blocking
                    select.select([], [self.fd], [])
        except OSError:  # the parent is gone: nothing more can be delivered
            self.broken = True


def _scrubbed_frame(batch: list[Any]) -> bytes:
    """The frame of ``batch`` with the run's secrets masked in its strings, as the parent
    masks what it writes: a server that echoes the key puts it in records and events,
    and over ``--ray`` this frame crosses the network before the parent sees it."""
    data = frame(batch)
    if not REDACTOR.found(data):
        return data
    body = REDACTOR.json(data[4:])  # after the 4-byte big-endian length (stress.store.wire)
    return len(body).to_bytes(4, "big") + body


def _register_secrets(headers: dict[str, str]) -> None:
    """The key the parent scrubs, taken from the request headers it sent this worker."""
    for name, value in headers.items():
        if name.lower() == "authorization":
            redact_auth_header(value)


class PipeSink:
    """The engine's recorder and the health collector's sink, in a worker: each request
    gets a sequence number of this worker's, the parent's key for it."""

    def __init__(self, out: Outbox, t0: float, worker: int) -> None:
        self.out = out
        self.t0 = t0
        self.worker = worker
        self._seq = itertools.count()
        self._ids: dict[int, int] = {}
        self.flying: dict[int, RequestRecord] = {}
        self._sent: dict[int, tuple[Any, ...]] = {}

    def request_started(self, rec: RequestRecord) -> None:
        seq = next(self._seq)
        self._ids[id(rec)] = seq
        self.flying[seq] = rec
        self.out.put(["s", seq, rec])
        self.out.flush()  # on the pipe before the request is sent

    def write_request(self, rec: RequestRecord, token_times: array[float] | None = None) -> None:
        seq = self._ids.pop(id(rec))
        self.flying.pop(seq, None)
        self._sent.pop(seq, None)
        t_end = time.perf_counter() - self.t0
        self.out.put(["r", seq, rec, t_end, pack_times(token_times)])

    def event(self, ev: RunEvent) -> None:
        if ev.source == "client":  # this worker's own health: say whose
            ev.message = f"worker {self.worker}: {ev.message}"
            ev.data = {**ev.data, "worker": self.worker}
        self.out.put(["e", ev])

    def write(self, stream: str, record: dict[str, Any]) -> None:
        self.out.put(["w", stream, record])

    def progress(self) -> list[list[Any]]:
        """What changed on the requests in flight since the last call (the live view's
        waiting / streaming / silent states read these fields)."""
        rows = []
        for seq, r in self.flying.items():
            row = (r.t_sched, r.t_start, r.ttft_s, r.chunks_content, r.chunks_reasoning,
                   r.t_last_byte, r.request_id)  # fmt: skip
            if self._sent.get(seq) != row:
                self._sent[seq] = row
                rows.append([seq, *row])
        return rows


class PipeLive:
    """The engine's live state, in a worker: user states and the phase go to the parent;
    sends and records need nothing here (the parent's Live takes them from the records)."""

    open_loop = False
    backlog = 0

    def __init__(self, out: Outbox) -> None:
        self.out = out
        self._phase = ""

    @property
    def phase(self) -> str:
        return self._phase

    @phase.setter
    def phase(self, value: str) -> None:
        self._phase = value
        self.out.put(["p", value])

    def on_send(self, rec: RequestRecord) -> None:
        pass

    def on_record(self, rec: RequestRecord, t_end: float) -> None:
        pass

    def set_state(self, user: int, state: str, until: float | None = None) -> None:
        self.out.put(["u", user, state, until])

    def on_arrival(self, t: float) -> None:
        pass

    def start_session(self, user: int) -> None:
        pass

    def end_session(self, user: int, admitted: bool = True) -> None:
        pass


class Worker:
    def __init__(self, cfg: dict[str, Any], out: Outbox) -> None:
        self.cfg = cfg
        self.out = out
        _register_secrets(cfg["headers"])  # first: every frame from now on is scrubbed
        self.k: int = cfg["worker"]
        self.n: int = cfg["workers"]
        self.plan = [(label, Scenario.model_validate(step)) for label, step in cfg["plan"]]
        self.t0 = 0.0
        """The run clock's origin (perf seconds), from the parent's ``clock`` message."""
        self.skew_ns = 0
        """The parent's perf clock less this process's (``sync_clock``): 0 on one machine,
        where every process reads one CLOCK_MONOTONIC; measured for a Ray worker."""
        self.sink = PipeSink(out, self.t0, self.k)
        self.live = PipeLive(out)
        self.engine: Engine | None = None
        self.stop_reason: str | None = None
        self.counters = RunCounters()
        sc = self.plan[0][1]
        self.client = ChatClient(
            cfg["url"],
            cfg["headers"],
            TimeoutPolicy(
                sc.timeouts.connect, sc.timeouts.first_token, sc.timeouts.stall, sc.timeouts.total
            ),
            limit=cfg["connections"][self.k],  # the run plan's, for this worker's users
            reuse=sc.connection.reuse,
            clock_t0=self.t0,
        )
        self.corpus: Corpus | None = None
        self.interval = sc.telemetry.interval
        self.health: ClientHealthCollector | None = None

    async def setup(self) -> None:
        tokenizer = get_tokenizer()
        root = self.cfg.get("corpus")
        if self.cfg.get("corpus_files"):  # a node without the driver's files (Ray)
            root = str(_unpack_corpus(self.cfg["corpus_files"], self.cfg["corpus_root"]))
        if root:
            self.corpus = await asyncio.to_thread(Corpus, Path(root), tokenizer)

    async def serve(self, reader: asyncio.StreamReader) -> None:
        stop_bg = asyncio.Event()
        background: list[asyncio.Task[None]] = []
        phases: list[asyncio.Task[None]] = []
        quit_ = False
        while not quit_:
            msgs = await read_frame(reader)
            if msgs is None:  # the parent is gone: stop at once, nobody can record
                self.out.broken = True
                if self.engine is not None:
                    self.engine.request_stop("parent_gone")
                    self.engine.cancel_in_flight()
                break
            for m in msgs:
                op = m[0]
                if op == "clock":  # the run starts: one clock with the parent's
                    self._start_clock(m[1], m[2])
                    self.health = ClientHealthCollector(self.sink, self.clock, self.interval)
                    background.append(asyncio.create_task(self.health.run(stop_bg)))
                    background.append(asyncio.create_task(self._ticker(stop_bg)))
                elif op == "go":
                    t_phase = m[2] - self.skew_ns / 1e9  # on this process's clock
                    phases.append(asyncio.create_task(self._phase(m[1], t_phase)))
                elif op == "stop":
                    self.stop_reason = self.stop_reason or m[1]
                    if self.engine is not None:
                        self.engine.request_stop(m[1])
                elif op == "cancel":
                    if self.engine is not None:
                        self.engine.cancel_in_flight()
                elif op == "quit":
                    quit_ = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*phases, return_exceptions=True), 5)
        stop_bg.set()
        await asyncio.gather(*background, return_exceptions=True)
        self.out.put(["bye", self.health.summary() if self.health else {}])
        self.out.flush()
        await self.client.close()

    def _start_clock(self, t0_ns: int, wall_t0: float) -> None:
        t0_ns -= self.skew_ns  # the parent's origin, read on this process's clock
        self.clock = RunClock(t0_ns, wall_t0)
        self.t0 = self.client.t0 = self.sink.t0 = t0_ns / 1e9

    async def _phase(self, index: int, t_phase: float) -> None:
        label, step = self.plan[index]
        out = self.out
        engine = self.engine = Engine(
            step,
            self.client,
            self.sink,
            self.live,
            self.corpus,
            self.cfg["model"],
            self.cfg["nonce"],
            self.t0,
            paste_scale=self.cfg["paste_scale"],
            on_stop=lambda reason: out.put(["x", reason]),
            phase=label,
            counters=self.counters,
            shard=(self.k, self.n),
            limits=False,
        )
        if self.stop_reason is not None:
            engine.request_stop(self.stop_reason)
        try:
            result = await engine.run(t_phase)
        except Exception as e:  # a bug: the parent records the worker's end with this
            out.put(["err", REDACTOR.text(f"{type(e).__name__}: {e}")[:500]])
            out.flush()
            os._exit(1)
        out.put(["d", index, result.exit_reason, result.requests])
        out.flush()

    async def _ticker(self, stop: asyncio.Event) -> None:
        last_health: dict[str, Any] = {}
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), TICK_S)
            rows = self.sink.progress()
            if rows:  # the hang watch compares last_byte with the parent's perf clock
                last_byte = self.client.last_byte + self.skew_ns / 1e9
                self.out.put(["f", last_byte, rows])
            health = self.health.live() if self.health else {}
            if health and health != last_health:
                last_health = health
                self.out.put(["h", health])
            self.out.flush()


SYNC_ROUNDS = 8
"""Ping-pong exchanges when the clock is synced; the one with the shortest round trip is
kept (its error is at most half that round trip)."""


async def sync_clock(reader: asyncio.StreamReader, out: Outbox) -> tuple[int, int]:
    """The parent's perf clock less this process's, in ns, and the round trip it was
    measured with: NTP's estimate (the parent read its clock halfway through the exchange)
    over ``SYNC_ROUNDS`` pings, the shortest round trip's."""
    best: tuple[int, int] | None = None
    for _ in range(SYNC_ROUNDS):
        t1 = time.perf_counter_ns()
        out.put(["ping", t1])
        out.flush()
        msgs = await read_frame(reader)
        t2 = time.perf_counter_ns()
        if not msgs or msgs[0][0] != "pong" or msgs[0][1] != t1:
            raise ConnectionError("the parent did not answer the clock's ping")
        rtt = t2 - t1
        if best is None or rtt < best[1]:
            best = (msgs[0][2] - (t1 + t2) // 2, rtt)
    assert best is not None
    return best


async def _serve(reader: asyncio.StreamReader, out: Outbox, hello: list[Any]) -> int:
    """Say hello, take the parent's config, set up, say ready, then serve the run."""
    out.put(hello)
    out.flush()
    first = await read_frame(reader)
    if not first:
        return 1
    try:
        worker = Worker(first[0], out)
        clock: dict[str, Any] = {}
        if worker.cfg.get("sync_clock"):
            worker.skew_ns, rtt = await sync_clock(reader, out)
            clock = {"clock_skew_ns": worker.skew_ns, "clock_rtt_ns": rtt}
        await worker.setup()
    except Exception as e:
        out.put(["err", REDACTOR.text(f"could not set up: {type(e).__name__}: {e}")[:500]])
        out.flush()
        return 1
    out.put(["ready", clock])
    out.flush()
    await worker.serve(reader)
    return 0


async def _main(proto_fd: int) -> int:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 22)
    stdin = os.fdopen(0, "rb", buffering=0)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
    return await _serve(reader, Outbox(proto_fd), ["hello", os.getpid()])


async def _connected(host: str, port: int, hello: list[Any]) -> int:
    sock = socket.create_connection((host, port), timeout=30)
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, PIPE_BYTES)
    reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 22)
    try:  # the writer only keeps the transport; frames go out through the Outbox
        return await _serve(reader, Outbox(sock.fileno()), hello)
    finally:
        writer.close()


def run_connected(host: str, port: int, hello: list[Any]) -> int:
    """A worker that reaches its parent over TCP (a Ray actor, ``stress.runtime.ray_pool``):
    the same worker as ``python -m stress.runtime.worker``, one socket instead of two pipes."""
    from stress.runtime.loop import run_async

    return run_async(_connected(host, port, hello))


def _unpack_corpus(files: dict[str, str], root_name: str) -> Path:
    """The driver's corpus documents (``stress.runtime.ray_pool`` ships them), written under a
    folder of this process's: the same names in the same order, so the same excerpts."""
    base = Path(tempfile.mkdtemp(prefix="stress-corpus-"))
    for rel, text in files.items():
        path = base / root_name / rel if rel else base / root_name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return base / root_name


def main() -> int:
    # the frames get a descriptor of their own: a stray print goes to stderr, never into one
    proto_fd = os.dup(1)
    os.dup2(2, 1)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    from stress.runtime.loop import run_async

    try:
        return run_async(_main(proto_fd))
    except Exception as e:  # one line on stderr; the parent puts it in worker_died
        print(REDACTOR.text(f"stress worker: {type(e).__name__}: {e}"), file=sys.stderr)
        return 70


if __name__ == "__main__":
    sys.exit(main())
