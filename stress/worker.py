"""One worker process of a ``--workers N`` run: a shard of the users on its own event loop.

``python -m stress.worker`` is started by the run's parent (``stress.pool``) with three
pipes: the parent's frames come on stdin, this process's on stdout (``stress.wire``),
stderr is kept by the parent for the ``worker_died`` event. The worker builds its own
aiohttp session, client, tokenizer, corpus and ``Engine`` for users u with u % N == k, on
the parent's run clock (``t0_ns``: ``perf_counter`` is CLOCK_MONOTONIC on Linux, one clock
for every process of the machine). It owns no file: every request start, record, event,
user state and health sample goes to the parent, which records and shows them.

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
import signal
import sys
import time
from array import array
from pathlib import Path
from typing import Any

from stress.client import ChatClient, TimeoutPolicy
from stress.collectors.base import RunClock
from stress.collectors.client import ClientHealthCollector
from stress.corpus import Corpus
from stress.engine import Engine, RunCounters
from stress.events import RunEvent
from stress.record import RequestRecord
from stress.scenario import Scenario
from stress.target import make_session
from stress.tokens import get_tokenizer
from stress.wire import frame, pack_times, read_frame

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
        with contextlib.suppress(OSError):
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
        view = memoryview(frame(batch))
        try:
            while view:
                view = view[os.write(self.fd, view) :]
        except OSError:  # the parent is gone: nothing more can be delivered
            self.broken = True


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
        self.k: int = cfg["worker"]
        self.n: int = cfg["workers"]
        self.plan = [(label, Scenario.model_validate(step)) for label, step in cfg["plan"]]
        self.t0 = 0.0
        """The run clock's origin (perf seconds), from the parent's ``clock`` message."""
        self.sink = PipeSink(out, self.t0, self.k)
        self.live = PipeLive(out)
        self.engine: Engine | None = None
        self.stop_reason: str | None = None
        self.counters = RunCounters()
        sc = self.plan[0][1]
        users = len(range(self.k, max(s.users.count for _, s in self.plan), self.n))
        self.session = make_session(
            max(users, sc.connection.limit or 0) + 4,
            sc.timeouts.connect,
            force_close=not sc.connection.reuse,
        )
        self.client = ChatClient(
            self.session,
            cfg["url"],
            cfg["headers"],
            TimeoutPolicy(
                sc.timeouts.connect, sc.timeouts.first_token, sc.timeouts.stall, sc.timeouts.total
            ),
            fresh_session=lambda: make_session(users + 4, sc.timeouts.connect, True),
            clock_t0=self.t0,
        )
        self.corpus: Corpus | None = None
        self.interval = sc.telemetry.interval
        self.health: ClientHealthCollector | None = None

    async def setup(self) -> None:
        tokenizer = get_tokenizer()
        if self.cfg.get("corpus"):
            self.corpus = await asyncio.to_thread(Corpus, Path(self.cfg["corpus"]), tokenizer)

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
                    phases.append(asyncio.create_task(self._phase(m[1], m[2])))
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
        await self.session.close()

    def _start_clock(self, t0_ns: int, wall_t0: float) -> None:
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
            out.put(["err", f"{type(e).__name__}: {e}"[:500]])
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
            if rows:
                self.out.put(["f", self.client.last_byte, rows])
            health = self.health.live() if self.health else {}
            if health and health != last_health:
                last_health = health
                self.out.put(["h", health])
            self.out.flush()


async def _main(proto_fd: int) -> int:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 22)
    stdin = os.fdopen(0, "rb", buffering=0)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
    out = Outbox(proto_fd)
    out.put(["hello", os.getpid()])
    out.flush()
    first = await read_frame(reader)
    if not first:
        return 1
    try:
        worker = Worker(first[0], out)
        await worker.setup()
    except Exception as e:
        out.put(["err", f"could not set up: {type(e).__name__}: {e}"[:500]])
        out.flush()
        return 1
    out.put(["ready"])
    out.flush()
    await worker.serve(reader)
    return 0


def main() -> int:
    # the frames get a descriptor of their own: a stray print goes to stderr, never into one
    proto_fd = os.dup(1)
    os.dup2(2, 1)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    from stress.cli import run_async

    try:
        return run_async(_main(proto_fd))
    except Exception as e:  # one line on stderr; the parent puts it in worker_died
        print(f"stress worker: {type(e).__name__}: {e}", file=sys.stderr)
        return 70


if __name__ == "__main__":
    sys.exit(main())
