"""The parent's side of a ``--workers N`` run: start the workers, apply what they send.

The parent keeps everything that must have one owner: the run directory (one
``Recorder``, so every file keeps a single writer and stays crash-safe), the live view,
the collectors, the hang watch, the run-wide limits and the stop logic. Each worker
(``stress.runtime.worker``) runs the users u with u % N == k and streams its requests' start
notices, records, events and health here over its stdout (``stress.store.wire``); this module
applies them exactly as the engine would in one process: a start to the recorder's
in-flight count and the live view, a record to the recorder, the live view and the
limits.

A worker that ends without saying ``bye`` (``kill -9``, a crash) is a ``worker_died``
event, and every request it had started without a record gets one: an error of class
``worker_died`` (stress's failure, not the server's). The other workers go on; the
verdict is FAIL (``stress.analysis.checks``).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from stress.collectors.base import RunClock
from stress.config.scenario import Limits
from stress.core.events import RunEvent
from stress.core.record import RequestRecord
from stress.core.secrets import REDACTOR
from stress.live.state import Live
from stress.load.engine import RunCounters, count_request, shard_users
from stress.store.recorder import Recorder
from stress.store.wire import frame, read_frame, unpack_times

GO_LEAD_S = 0.02
"""A phase starts this long after the parent says go: every worker has the message by
then, so all of them count their users' ramp-up from the same instant."""
STDERR_LINES = 20
QUIT_GRACE_S = 10.0
"""How long a worker may take to say bye once told to quit, before it is killed."""
_NORMAL_ENDS = ("duration", "rounds", "done")


class Link(Protocol):
    """How the parent reaches one worker: frames in (``reader``), frames out (``write``),
    and the worker's end. A subprocess's pipes here (``ProcLink``); a Ray actor's socket
    in ``stress.runtime.ray_pool``."""

    pid: int
    reader: asyncio.StreamReader
    info: dict[str, Any]
    """What the manifest keeps of this worker besides its pid (its node, for Ray)."""

    def write(self, data: bytes) -> None: ...

    def kill(self) -> None: ...

    async def wait(self) -> int | None:
        """The worker's exit status once it has ended: 0, an exit code, minus a signal;
        None where the status is unknown (a Ray actor that died)."""
        ...

    async def errors(self, lines: deque[str]) -> None:
        """Collect the worker's stderr lines until it ends (for ``worker_died``)."""
        ...

    def why(self) -> str | None:
        """What the platform said of the worker's end, where it says anything (Ray)."""
        ...


class Launcher(Protocol):
    """Starts the workers of a run: local subprocesses here, Ray actors elsewhere."""

    def prepare(self, config: dict[str, Any]) -> dict[str, Any]:
        """The config as this launcher's workers need it (what a node lacks, shipped)."""
        ...

    async def launch(self, n: int) -> list[Link]: ...

    async def close(self) -> None: ...


class ProcLink:
    """A ``python -m stress.runtime.worker`` subprocess: frames on its stdin and stdout."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        self.proc = proc
        self.pid = proc.pid
        self.reader: asyncio.StreamReader = proc.stdout
        self.info: dict[str, Any] = {}

    def write(self, data: bytes) -> None:
        stdin = self.proc.stdin
        if stdin is None or stdin.is_closing():
            return
        with contextlib.suppress(OSError, RuntimeError):
            stdin.write(data)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()

    async def wait(self) -> int:
        return await self.proc.wait()

    async def errors(self, lines: deque[str]) -> None:
        assert self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            text = line.decode("utf-8", "replace").strip()
            if text:
                lines.append(text)

    def why(self) -> None:
        return None


class LocalLauncher:
    """Workers as subprocesses of this machine (``--workers N``)."""

    def prepare(self, config: dict[str, Any]) -> dict[str, Any]:
        return config

    async def launch(self, n: int) -> list[Link]:
        links: list[Link] = []
        for _ in range(n):
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "stress.runtime.worker",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=1 << 22,
            )
            links.append(ProcLink(proc))
        return links

    async def close(self) -> None:
        pass


@dataclass(slots=True)
class _Worker:
    k: int
    link: Link
    users: range
    pid: int = 0
    flying: dict[int, RequestRecord] = field(default_factory=dict)
    done: dict[int, tuple[str, int]] = field(default_factory=dict)
    alive: bool = True
    said_bye: bool = False
    error: str | None = None
    last_byte: float = 0.0
    phase: str = ""
    health: dict[str, Any] | None = None
    """The worker's ``ClientHealthCollector`` summary (from its ``bye``)."""
    stderr: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_LINES))
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    clock: dict[str, Any] = field(default_factory=dict)
    """The clock's sync (skew and round trip, in ns) where one was measured (Ray)."""
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


def _where(w: _Worker) -> dict[str, Any]:
    """The live view's name for where a worker runs: its host, for a Ray worker."""
    host = w.link.info.get("host")
    return {"host": host} if host else {}


class WorkerPool:
    """N worker processes of one run, driven phase by phase (``run_phase``)."""

    def __init__(
        self,
        n: int,
        users: int,
        limits: Limits,
        counters: RunCounters,
        on_stop: Callable[[str], None],
        launcher: Launcher | None = None,
    ) -> None:
        self.n = n
        self.launcher: Launcher = launcher or LocalLauncher()
        self.users = users
        self.recorder: Recorder | None = None
        self.live = Live(0)
        self.clock = RunClock.start()
        self.limits = limits
        self.counters = counters
        self._on_stop = on_stop
        self.workers: list[_Worker] = []
        self.stop_reason: str | None = None
        self._announced: set[int] = set()
        self._phase = 0
        self._changed = asyncio.Event()
        self._early_deaths: list[tuple[_Worker, int | None]] = []
        """Workers that died setting up, before ``attach``: recorded there."""

    # --- starting ------------------------------------------------------------------------

    async def start(self, config: dict[str, Any]) -> list[int]:
        """Start the workers and send each its part; their pids, once all are set up (or
        have died trying). Called before the run clock starts: the seconds the workers
        take to start (imports, tokenizer, corpus) are no part of the run's duration."""
        config = self.launcher.prepare(config)
        for k, link in enumerate(await self.launcher.launch(self.n)):
            w = _Worker(k, link, shard_users(self.users, (k, self.n)), pid=link.pid)
            self.workers.append(w)
            self._send(w, {**config, "worker": k, "workers": self.n})
            w.tasks = [
                asyncio.create_task(self._read(w), name=f"worker-{k}"),
                asyncio.create_task(link.errors(w.stderr), name=f"worker-{k}-stderr"),
            ]
        for w in self.workers:
            ready = asyncio.ensure_future(w.ready.wait())
            ended = asyncio.ensure_future(w.tasks[0])
            await asyncio.wait([ready, ended], return_when=asyncio.FIRST_COMPLETED)
            ready.cancel()
        return [w.pid for w in self.workers]

    def attach(self, recorder: Recorder, live: Live, clock: RunClock) -> None:
        """The run has its files, live view and clock: start the workers' clocks (their
        health sampling begins) and record any worker that died setting up."""
        self.recorder, self.live, self.clock = recorder, live, clock
        for w in self.workers:
            live.workers[w.k] = {"pid": w.pid, **_where(w)}
            self._send(w, ["clock", clock.t0_ns, clock.wall_t0])
        for w, rc in self._early_deaths:
            self._died(w, rc)
        self._early_deaths.clear()

    def kill(self) -> None:
        """End every worker now."""
        for w in self.workers:
            w.link.kill()

    async def abort(self) -> None:
        """The run could not start: end every worker and let go of where they ran (a Ray
        cluster's CPUs)."""
        self.kill()
        await self.launcher.close()

    def details(self) -> list[dict[str, Any]]:
        """Where each worker ran (the manifest's fingerprint): pid, and for Ray its node
        and the measured clock skew."""
        return [{"worker": w.k, "pid": w.pid, **w.link.info, **w.clock} for w in self.workers]

    # --- stopping ------------------------------------------------------------------------

    def request_stop(self, reason: str) -> None:
        """No new turns in any worker; requests in flight finish."""
        if self.stop_reason is not None:
            return
        self.stop_reason = reason
        self._announce(reason)
        for w in self.workers:
            self._send(w, ["stop", reason])

    def cancel_in_flight(self) -> None:
        """Cancel every worker's requests in flight (each still gets its record)."""
        for w in self.workers:
            self._send(w, ["cancel"])

    def _announce(self, reason: str) -> None:
        if self._phase not in self._announced:
            self._announced.add(self._phase)
            self._on_stop(reason)

    # --- phases ----------------------------------------------------------------------------

    async def run_phase(self, index: int) -> str:
        """Run phase ``index`` of the plan in every live worker; the run's exit reason for
        it, combined from the workers' as one engine would have said it."""
        self._phase = index
        t_phase = time.perf_counter() + GO_LEAD_S
        for w in self.workers:
            self._send(w, ["go", index, t_phase])
        while any(w.alive and index not in w.done for w in self.workers):
            self._changed.clear()
            await self._changed.wait()
        return self._exit_reason([w.done[index][0] for w in self.workers if index in w.done])

    def _exit_reason(self, reasons: list[str]) -> str:
        if self.stop_reason is not None:  # Ctrl-C, a limit, the recorder: the run's own
            return self.stop_reason
        if not reasons:
            return "worker_died"  # every worker died
        odd = [r for r in reasons if r not in _NORMAL_ENDS]
        if odd:
            return odd[0]
        return "duration" if "duration" in reasons else reasons[0]

    async def close(self) -> None:
        """Tell every worker to finish and wait for its bye (its last records come
        before it); one that does not say it within ``QUIT_GRACE_S`` is killed, and one
        that died is accounted for (``_died``)."""
        for w in self.workers:
            self._send(w, ["quit"])
        deadline = time.perf_counter() + QUIT_GRACE_S
        while any(w.alive and not w.said_bye for w in self.workers):
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), deadline - time.perf_counter())
            if time.perf_counter() >= deadline:
                break
        for w in self.workers:
            if w.alive and not w.said_bye:
                w.link.kill()
        # a killed worker's in-flight requests get their records when its pipe ends
        await asyncio.gather(
            *(w.tasks[0] for w in self.workers if w.tasks and not w.said_bye),
            return_exceptions=True,
        )

    async def reap(self) -> None:
        """Wait for the workers' processes to exit (after their bye: no part of the run's
        duration), killing any that linger."""
        tasks = [t for w in self.workers for t in w.tasks]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=QUIT_GRACE_S)
            if pending:
                self.kill()
                await asyncio.gather(*pending, return_exceptions=True)
        await self.launcher.close()

    @property
    def first_written(self) -> None:
        """The workers write the requests, not this process (``Executor.first_written``)."""
        return None

    @property
    def last_byte(self) -> float:
        """When a stream of any worker last received bytes (perf time), for the hang watch."""
        return max((w.last_byte for w in self.workers), default=0.0)

    def health(self) -> dict[str, dict[str, Any]]:
        """Each worker's health summary, by worker number (collectors.json ``workers``)."""
        return {
            str(w.k): {"pid": w.pid, "died": not w.said_bye, **(w.health or {})}
            for w in self.workers
        }

    # --- what the workers send ------------------------------------------------------------

    def _send(self, w: _Worker, msg: Any) -> None:
        if w.alive:
            w.link.write(frame([msg]))

    async def _read(self, w: _Worker) -> None:
        try:
            while (msgs := await read_frame(w.link.reader)) is not None:
                for m in msgs:
                    self._apply(w, m)
        except Exception as e:  # a message this parent cannot apply: that worker ends
            w.error = f"the parent could not apply its message ({type(e).__name__}: {e})"
            w.link.kill()
        rc = await w.link.wait()
        w.error = w.error or w.link.why()
        if not w.said_bye or w.flying:
            await asyncio.sleep(0.05)  # the last words on stderr, for the event
            if self.recorder is None:
                self._early_deaths.append((w, rc))
            else:
                self._died(w, rc)
        w.alive = False
        self._changed.set()

    def _apply(self, w: _Worker, m: list[Any]) -> None:
        op = m[0]
        if self.recorder is None:  # setting up: nothing but these comes before the clock
            if op == "ping":  # the worker syncs its clock with ours (Ray: another machine)
                self._send(w, ["pong", m[1], time.perf_counter_ns()])
            elif op == "ready":
                w.clock = m[1] if len(m) > 1 else {}
                w.ready.set()
            elif op == "hello":
                w.pid = m[1]
            elif op == "err":
                w.error = str(m[1])
            return
        recorder = self.recorder
        if op == "s":
            rec = RequestRecord(0, 0, 0, 0)
            for name, value in m[2].items():  # 5x faster than RequestRecord(**fields)
                setattr(rec, name, value)
            w.flying[m[1]] = rec
            recorder.request_started(rec)
            self.live.on_send(rec)
        elif op == "f":
            w.last_byte = m[1]
            for seq, *row in m[2]:
                flying = w.flying.get(seq)
                if flying is not None:
                    (
                        flying.t_sched,
                        flying.t_start,
                        flying.ttft_s,
                        flying.chunks_content,
                        flying.chunks_reasoning,
                        flying.t_last_byte,
                        flying.request_id,
                    ) = row
        elif op == "r":
            self._record(w.flying.pop(m[1]), m[2], m[3], unpack_times(m[4]))
        elif op == "e":
            recorder.event(RunEvent(**m[1]))
        elif op == "u":
            self.live.set_state(m[1], m[2], m[3])
        elif op == "p":
            w.phase = m[1]
            first = next((x for x in self.workers if x.alive), w)
            if first is w:  # one voice for the live view's phase: the first live worker
                self.live.phase = m[1]
        elif op == "w":
            if m[1] == "client":  # a worker's health: workers.jsonl, client.jsonl is ours
                recorder.write("workers", {"worker": w.k, **m[2]})
            else:
                recorder.write(m[1], m[2])
        elif op == "h":
            self.live.workers[w.k] = {"pid": w.pid, **_where(w), **m[1]}
        elif op == "x":
            self._announce(m[1])
        elif op == "d":
            w.done[m[1]] = (m[2], m[3])
            self._changed.set()
        elif op == "ready":
            w.ready.set()
        elif op == "hello":
            w.pid = m[1]
        elif op == "bye":
            w.said_bye = True
            w.health = m[1]
            self._changed.set()
        elif op == "err":
            w.error = str(m[1])

    def _record(self, rec: RequestRecord, fields: dict[str, Any], t_end: float, times: Any) -> None:
        for name, value in fields.items():
            setattr(rec, name, value)
        self._account(rec, t_end, times)

    def _account(self, rec: RequestRecord, t_end: float, times: Any = None) -> None:
        assert self.recorder is not None
        self.recorder.write_request(rec, times)
        self.live.on_record(rec, t_end)
        reason = count_request(self.counters, rec, self.limits)
        if reason is not None:
            self.request_stop(reason)

    def _died(self, w: _Worker, rc: int | None) -> None:
        w.alive = False
        if rc is None:
            how = "its process ended"
        else:
            how = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exit code {rc}"
        said = [line for line in w.stderr if line.startswith("stress worker")]
        tail = said or list(w.stderr)
        why = w.error or (tail[-1] if tail else None)
        n = len(w.flying)
        now = self.clock.now()
        assert self.recorder is not None
        self.recorder.event(
            RunEvent(
                now,
                "worker_died",
                f"worker {w.k} (pid {w.pid}) died ({how}{'; ' + REDACTOR.text(why) if why else ''})"
                f": its {n} request(s) in flight are recorded as worker_died errors and its "
                f"{len(w.users)} users send nothing more",
                "error",
                data={
                    "worker": w.k,
                    "pid": w.pid,
                    "returncode": rc,
                    "in_flight": n,
                    "users": len(w.users),
                },
            )
        )
        for _, rec in sorted(w.flying.items()):
            rec.outcome, rec.error_class = "error", "worker_died"
            rec.error = (
                f"worker {w.k} died ({how}) with this request in flight: what the server "
                "answered is unknown (stress's failure, not the server's)"
            )
            self._account(rec, now)
        w.flying.clear()
        for u in w.users:
            self.live.set_state(u, "done")
        self.live.workers[w.k] = {**self.live.workers.get(w.k, {}), "dead": True}
