"""One run from start to finish: pre-flight, run directory, engine, UI, summary.

This is the only place that wires the pieces together. Whatever happens during the run
(an exception, Ctrl-C, a limit), the ``finally`` path flushes the files, completes the
manifest and writes the summary: a failure is recorded, data already collected is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import stress
from stress.collectors.base import Collector, RunClock
from stress.collectors.probe import check_users
from stress.config.plan import RunPlan, plan_run
from stress.config.scenario import LoadedScenario, Scenario, worker_count
from stress.core.errors import RecordingError, RunDirError, StressError
from stress.core.events import QUIET_EVENT_KINDS, RunEvent, Severity
from stress.core.secrets import REDACTOR, safe_url
from stress.core.signals import SIGNALS
from stress.core.tokens import get_tokenizer
from stress.live.hangs import HangGate
from stress.live.headless import HeadlessPrinter, UiSink
from stress.live.state import Live
from stress.load.corpus import Corpus
from stress.load.engine import Engine, RunCounters
from stress.net.client import ChatClient
from stress.net.deadlines import TimeoutPolicy
from stress.net.fetch import Fetcher
from stress.runtime.background import (
    flusher,
    gpu_answer,
    late_gpu,
    make_collectors,
    monitor,
    run_collector,
)
from stress.runtime.calibrate import server_token_count
from stress.runtime.conclude import conclude_files, guarded
from stress.runtime.executor import Executor, InProcess
from stress.runtime.gpu_discovery import GpuDiscovery
from stress.runtime.preflight import gpu_warnings, preflight
from stress.runtime.provenance import platform_text, versions
from stress.runtime.target import Target, make_session, open_target
from stress.store.recorder import Recorder, new_run_dir, write_json

if TYPE_CHECKING:  # the end-of-run modules load when the run ends (docs/performance.md)
    from stress.core.tokens import Tokenizer
    from stress.live.metrics_export import MetricsExporter
    from stress.live.view_process import ViewChild
    from stress.load.replay import TraceRequest
    from stress.runtime.pool import WorkerPool
    from stress.runtime.ray_pool import RayLauncher


def _check_shared_clock() -> None:
    """Workers stamp times on the parent's run clock: ``perf_counter`` must be one clock
    for every process of the machine (CLOCK_MONOTONIC, as on Linux), not per process."""
    impl = time.get_clock_info("perf_counter").implementation
    if "CLOCK_MONOTONIC" not in impl:
        raise StressError(
            f"--workers needs a clock shared by processes; perf_counter here is {impl} -- "
            "fix: run with --workers 1 on this system"
        )


@dataclass(slots=True)
class RunOutcome:
    run_dir: Path
    summary: dict[str, Any]
    exit_reason: str
    concluded: bool = True
    """False: the files are complete and summary.json and the report are still to be
    written (``execute(conclude=False)``: ``stress.runtime.conclude`` writes them)."""


async def execute(
    loaded: LoadedScenario,
    out_dir: Path,
    *,
    progress_interval: float | None = None,
    ui: Literal["headless", "tui"] = "headless",
    search: str | None = None,
    metrics: MetricsExporter | None = None,
    ray: str | None = None,
    gpu_discovery: GpuDiscovery | None = None,
    view: ViewChild | None = None,
    conclude: bool = True,
) -> RunOutcome:
    """Run the scenario once into a new run directory under ``out_dir``; ``search`` is
    where a capacity search stands (the live view's header shows it); ``metrics``, when
    given, serves the run's live Prometheus metrics (``stress.live.metrics_export``); ``ray``,
    when given, runs the workers as actors of the Ray cluster at that address (``""``:
    the one this machine belongs to; ``stress.runtime.ray_pool``); ``gpu_discovery``: the GPU
    pre-flight already started (else it starts now); ``view``: with ``ui="tui"``, the live
    view's process already started (else the run starts it); ``conclude`` off: the run
    ends with its files complete, summary.json and the report left to the caller."""
    session = make_session(loaded.scenario.timeouts.connect)
    found = gpu_discovery or GpuDiscovery()
    gpu = asyncio.ensure_future(found.result())  # NVML in a child process, meanwhile
    try:
        async with open_target(loaded, session) as target:
            opts = _Options(progress_interval, ui, search, metrics, ray, view, conclude)
            return await _Run(loaded, out_dir, session, target, opts, gpu)()
    finally:
        if not gpu.done():
            gpu.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await gpu
        found.discard()
        await session.close()


@dataclass(frozen=True, slots=True)
class _Options:
    """How ``execute`` was asked to run (its keyword arguments)."""

    progress_interval: float | None
    ui: Literal["headless", "tui"]
    search: str | None
    metrics: MetricsExporter | None
    ray: str | None
    view: ViewChild | None
    conclude: bool = True


class _Run:
    """One run's steps in order, each leaving what the next needs: ``prepare`` (inputs,
    pre-flight, workers: before the run clock), ``open`` (run directory, clock, UI,
    recorder, manifest), ``executor``, ``start_background``, ``announce``, ``run_phases``,
    ``finish`` (always: the files are completed whatever happened) and ``conclude``."""

    executor: Executor
    run_dir: Path
    live: Live
    clock: RunClock
    printer: UiSink
    recorder: Recorder
    manifest: dict[str, Any]
    collectors: list[Collector]

    def __init__(
        self,
        loaded: LoadedScenario,
        out_dir: Path,
        session: Fetcher,
        target: Target,
        opts: _Options,
        gpu: asyncio.Future[dict[str, Any]] | None,
    ) -> None:
        self.loaded, self.out_dir, self.session, self.target = loaded, out_dir, session, target
        self.opts = opts
        self.gpu = gpu  # the GPU pre-flight until it has answered
        self.original = loaded.scenario
        self.plan = plan_run(self.original, target.time_scale, os.cpu_count())
        self.sc = self.plan.first
        self.counters = RunCounters()
        self.nonce = uuid.uuid4().hex[:10]
        self.launcher: RayLauncher | None = None
        self.pool: WorkerPool | None = None
        self.stop_bg = asyncio.Event()
        self.background: list[asyncio.Task[Any]] = []
        self.interrupts = 0
        self.exit_reason = "crashed"

    async def __call__(self) -> RunOutcome:
        await self.prepare()
        await self.start_workers()
        await self.open()
        self.executor = self.pool if self.pool is not None else self.in_process()
        self.start_background()
        give_back_signals = SIGNALS.take(self.on_sigint)
        try:
            await self.announce()
            await self.run_phases()
        except BaseException as e:
            self.event("run_crashed", f"{type(e).__name__}: {e}", "error")
            raise
        finally:
            await self.finish(give_back_signals)
        return self.conclude()

    # --- before the run clock -------------------------------------------------------------

    async def prepare(self) -> None:
        """The users' inputs, the server's pre-flight (and the GPUs', if it has answered)."""
        sc, target = self.sc, self.target
        self.tokenizer = get_tokenizer()
        self.inputs = await _prepare_inputs(self.loaded, sc, self.session, target, self.tokenizer)
        probe, warnings = await preflight(
            self.session,
            target.url,
            target.headers,
            sc.conversation.ceiling_tokens,
            sc.request.max_tokens,
        )
        answered = gpu_answer(self.gpu) if self.gpu is not None else None
        if answered is not None:
            probe = probe.model_copy(update={"gpu": answered})
            warnings += gpu_warnings(answered)
            self.gpu = None  # else it joins the manifest and the events when it answers
        self.probe, self.probe_warnings = probe, warnings + check_users(probe, self.plan.peak)
        self.server_kind = sc.target.server
        if self.server_kind == "auto" and probe.kind in ("vllm", "sglang", "llamacpp"):
            self.server_kind = probe.kind

    async def start_workers(self) -> None:
        """With ``--workers`` above 1 or ``--ray``: the workers, started and set up before
        the run clock (their imports and corpus are no part of the run's duration)."""
        if self.opts.ray is not None:
            from stress.runtime.ray_pool import RayLauncher

            self.launcher = RayLauncher.connect(self.opts.ray or None)  # one line if not
            self.plan = self.plan.with_workers(worker_count(self.original, self.launcher.cpus))
            try:
                self.launcher.check(self.plan.workers, self.target.url)
            except StressError:
                await self.launcher.close()  # leave the cluster before saying why
                raise
        if self.plan.workers <= 1 and self.launcher is None:
            return
        if self.launcher is None:
            _check_shared_clock()
        from stress.runtime.pool import WorkerPool

        self.pool = WorkerPool(
            self.plan.workers,
            self.plan.users,
            self.sc.limits,
            self.counters,
            self.on_stop("main"),
            self.launcher,
        )
        inputs = self.inputs
        config = _worker_config(
            self.loaded,
            self.plan,
            self.target,
            self.nonce,
            inputs.paste_scale,
            inputs.corpus_name,
        )
        try:
            await self.pool.start(config)
        except BaseException:
            await self.pool.abort()
            raise

    # --- the run's record -----------------------------------------------------------------

    async def open(self) -> None:
        """The run directory, the live state and clock, the UI, the recorder, the manifest."""
        try:
            self.run_dir = new_run_dir(self.out_dir, self.sc.name)
        except OSError as e:
            await self.abort()
            raise RunDirError(
                f"cannot create a run directory in {self.out_dir}: {e.strerror or e} -- fix: "
                "pass --out with a writable folder"
            ) from None
        self.live = Live(self.plan.users, time_scale=self.target.time_scale)
        self.clock = RunClock.start()
        self.printer = self.make_printer()
        metrics = self.opts.metrics
        if metrics is None:
            self.recorder = Recorder(self.run_dir, on_event=self.on_event, clock=self.clock.now)
        else:  # each accepted request record also feeds the live metrics
            self.recorder = metrics.recorder(
                self.run_dir, on_event=self.on_event, clock=self.clock.now
            )
        self.manifest = self.make_manifest()
        try:
            write_json(self.run_dir / "manifest.json", self.manifest)
        except OSError as e:
            await self.abort()
            raise RecordingError(
                f"cannot write {self.run_dir}: {e.strerror or e} -- fix: free space or pass "
                "--out on another disk; nothing was sent"
            ) from None

    async def abort(self) -> None:
        if self.pool is not None:
            await self.pool.abort()

    def make_printer(self) -> UiSink:
        """The live view's process (``--ui tui``), or the headless status lines."""
        live, clock, sc = self.live, self.clock, self.sc
        if self.opts.ui == "tui":
            from stress.live.view_process import TuiProcess  # its own process draws it

            return TuiProcess(
                _header(
                    self.original,
                    self.plan,
                    self.target,
                    self.server_kind,
                    self.run_dir,
                    self.opts.search,
                ),
                lambda rows=None: live.snapshot(clock.now(), rows),
                on_quit=lambda: self.executor.request_stop("interrupted"),
                on_cancel=lambda: self.executor.cancel_in_flight(),
                child=self.opts.view,
            )
        return HeadlessPrinter(
            lambda: live.snapshot(clock.now()),
            sc.duration,
            self.opts.progress_interval or (5.0 if (sc.duration or 0) <= 900 else 15.0),
        )

    def make_manifest(self) -> dict[str, Any]:
        """The run's provenance; ``finish`` completes its end time and exit reason."""
        target, pool, launcher, metrics = self.target, self.pool, self.launcher, self.opts.metrics
        return {
            "run_id": self.run_dir.name,
            "scenario": self.original.model_dump(mode="json"),
            "time_scale": target.time_scale,
            "scenario_file": str(self.loaded.path),
            "scenario_sha256": self.loaded.sha256,
            "versions": versions(),
            "host": {
                "hostname": socket.gethostname(),
                "platform": platform_text(),
                "cpus": os.cpu_count(),
            },
            "target_url": "sim (built-in simulator)" if target.sim else safe_url(target.url),
            "model": target.model,
            "models": target.models,
            **({"simulated_gpus": target.sim.config.gpus} if target.sim is not None else {}),
            "tokenizer": self.tokenizer.name,
            "token_budget": self.inputs.calibration,
            "paste_scale": self.inputs.paste_scale,
            "server_kind": self.server_kind,
            "probe": self.probe.to_dict(),
            "probe_warnings": self.probe_warnings,
            "cache_isolation": f"run nonce {self.nonce} in every prompt's opening marker",
            "workers": self.plan.workers,
            "plan": self.plan.manifest(),
            **({"worker_pids": [w.pid for w in pool.workers]} if pool is not None else {}),
            **({"worker_details": pool.details()} if pool is not None else {}),
            **(
                {"ray": {"address": launcher.address, "nodes": launcher.nodes()}}
                if launcher
                else {}
            ),
            "start_time": self.clock.wall_t0,
            "end_time": None,
            "exit_reason": None,
            "command": [os.path.basename(sys.argv[0]), *sys.argv[1:]],
            **({"metrics_url": metrics.url} if metrics is not None else {}),
        }

    def event(self, kind: str, text: str, severity: Severity, **kw: Any) -> None:
        self.recorder.event(RunEvent(self.clock.now(), kind, text, severity, **kw))

    def on_event(self, ev: RunEvent) -> None:
        if ev.kind in QUIET_EVENT_KINDS:  # one per session: in events.jsonl, not shown
            return
        self.live.on_event(ev)
        self.printer.on_event(ev)

    # --- the load ---------------------------------------------------------------------------

    def in_process(self) -> InProcess:
        """This process's engines (``--workers 1``), over one client of the plan's size."""
        sc, target, clock = self.sc, self.target, self.clock
        client = ChatClient(
            target.url,
            target.headers,
            TimeoutPolicy(
                sc.timeouts.connect,
                sc.timeouts.first_token,
                sc.timeouts.stall,
                sc.timeouts.total,
            ),
            limit=self.plan.connections(),
            reuse=sc.connection.reuse,
            clock_t0=clock.t0_ns / 1e9,
        )

        def make_engine(label: str, step: Scenario) -> Engine:
            return Engine(
                step,
                client,
                self.recorder,
                self.live,
                self.inputs.corpus,
                target.model,
                self.nonce,
                clock.t0_ns / 1e9,
                paste_scale=self.inputs.paste_scale,
                on_stop=self.on_stop(label),
                phase=label,
                counters=self.counters,
                trace=self.inputs.trace,
                time_scale=target.time_scale,
            )

        return InProcess(self.plan.steps, make_engine, client)

    def on_stop(self, label: str) -> Callable[[str], None]:
        """The line a stop prints: the run's (``main``), or a phase's end."""

        def said(reason: str) -> None:
            what = "stopping" if label == "main" else f"phase {label} ends"
            self.printer.line(
                f"[{self.clock.now():6.1f}s] {what} ({reason}): no new turns; finishing "
                "requests in flight"
            )

        return said

    def start_background(self) -> None:
        """The flusher, the UI, the collectors, the hang watch, the GPUs' late answer."""
        if self.pool is not None:
            self.pool.attach(self.recorder, self.live, self.clock)
        gate = HangGate(self.recorder.event)
        rec, clock, stop, executor = self.recorder, self.clock, self.stop_bg, self.executor
        first = executor.first_written
        self.collectors = make_collectors(
            self.loaded, rec, clock, self.session, self.target, self.server_kind, gate
        )
        tasks = [
            flusher(rec, stop, lambda: executor.request_stop("recorder_failed")),
            self.printer.run(stop),
            *(
                # one process sends: its first request first (workers: their own processes)
                run_collector(c, rec, clock, stop, first if c.name == "gpu" else None)
                for c in self.collectors
            ),
            monitor(
                self.live,
                self.collectors,
                lambda: executor.last_byte,
                gate,
                clock,
                self.sc.telemetry.hang_after,
                stop,
            ),
        ]
        if self.gpu is not None:
            tasks.append(late_gpu(self.gpu, stop, self.gpu_found))
        self.background = [asyncio.create_task(t) for t in tasks]

    def gpu_found(self, found: dict[str, Any]) -> None:
        """The GPU pre-flight answered during the run: into the manifest and the events."""
        self.manifest["probe"]["gpu"] = found
        warnings = gpu_warnings(found)
        self.manifest["probe_warnings"] += warnings
        for warning in warnings:
            self.event("preflight", warning, "warning", source="server")
        guarded(
            self.printer.line,
            "manifest.json",
            lambda: write_json(self.run_dir / "manifest.json", self.manifest),
        )

    def on_sigint(self) -> None:
        self.interrupts += 1
        if self.interrupts == 1:
            self.executor.request_stop("interrupted")
            self.printer.line("Ctrl-C: finishing requests in flight; Ctrl-C again cancels them")
        else:
            self.executor.cancel_in_flight()

    async def announce(self) -> None:
        """The run's first line, its live metrics, its start and pre-flight events; then
        wait (10 s at most) for the live view's header."""
        sc, target, load = self.sc, self.target, _load_text(self.original, self.plan)
        self.printer.line(
            f"stress {stress.__version__}: {sc.name} -> {self.manifest['target_url']} model "
            f"{target.model}, {load}, cache {sc.conversation.cache}; writing {self.run_dir}"
        )
        metrics = self.opts.metrics
        if metrics is not None:
            from stress.live.metrics_export import RunInfo

            live = self.live
            metrics.start_run(
                RunInfo(
                    sc.name,
                    self.run_dir.name,
                    target.model,
                    "sim" if target.sim else self.server_kind,
                    self.plan.peak,
                    target.time_scale,
                    in_flight=lambda: live.in_flight,
                    client_health=lambda: live.collectors.get("client"),
                    elapsed=self.clock.now,
                )
            )
            self.printer.line(f"live metrics: {metrics.url} (Prometheus; docs/live-metrics.md)")
        self.event("run_started", f"{sc.name}: {load}", "info", data={"run_nonce": self.nonce})
        for warning in self.probe_warnings:
            self.event("preflight", warning, "warning", source="server")
        started = getattr(self.printer, "started", None)
        if started is not None:  # the live view has its header (not its first screen: its
            with contextlib.suppress(TimeoutError):  # own process draws it, not this loop)
                await asyncio.wait_for(started.wait(), timeout=10)

    async def run_phases(self) -> None:
        """The plan's steps in turn, until one ends other than by its duration or rounds."""
        for i, (label, step) in enumerate(self.plan.steps):
            if i:
                if self.interrupts:
                    break
                self.event(
                    "phase_started",
                    f"phase {label}: {step.users.count} users",
                    "info",
                    data={"phase": label},
                )
            self.exit_reason = await self.executor.run_phase(i)
            if self.exit_reason not in ("duration", "rounds", "done"):
                break

    # --- the end ----------------------------------------------------------------------------

    async def finish(self, give_back_signals: Callable[[], None]) -> None:
        """Every record in, the background stopped, the files closed, the manifest and
        collectors.json completed: whatever happened before."""
        await self.executor.close()  # every worker's last records before the files close
        give_back_signals()
        self.stop_bg.set()
        await asyncio.gather(*self.background, return_exceptions=True)
        self.recorder.close()  # never raises: a failed write is in recorder.error
        if self.opts.metrics is not None:
            self.opts.metrics.end_run()
        if self.recorder.error is not None:
            self.exit_reason = "recorder_failed"
        self.manifest.update(
            end_time=time.time(), duration_s=self.clock.now(), exit_reason=self.exit_reason
        )
        tokens = self.live.completion_tokens
        results = {c.name: _safe_summary(c, tokens) for c in self.collectors}
        workers = self.executor.health()
        if workers is not None:  # the client is every process: the parent and its workers
            from stress.collectors.client import merge_health

            results["workers"] = workers
            results["client"] = merge_health([results["client"], *workers.values()])
        # the manifest stays provenance; what the collectors measured is a result
        run_dir, printer, manifest = self.run_dir, self.printer, self.manifest
        guarded(
            printer.line,
            "collectors.json",
            lambda: write_json(run_dir / "collectors.json", results),
        )
        guarded(
            printer.line, "manifest.json", lambda: write_json(run_dir / "manifest.json", manifest)
        )
        await self.executor.reap()

    def conclude(self) -> RunOutcome:
        """summary.json and the report, from the run directory; the summary on stdout.
        With ``conclude`` off (``stress run``), only the recording is checked: the caller
        concludes in a fresh process image (``stress.runtime.conclude``)."""
        if self.recorder.error is not None:
            raise _recording_error(self.run_dir, self.recorder)
        if not self.opts.conclude:
            return RunOutcome(self.run_dir, {}, self.exit_reason, concluded=False)
        summary = conclude_files(self.run_dir, self.printer.line)
        return RunOutcome(self.run_dir, summary, self.exit_reason)


@dataclass(slots=True)
class _Inputs:
    """What the users send, prepared before the run clock starts."""

    corpus_name: str | None
    calibration: str
    corpus: Corpus | None = None
    trace: list[TraceRequest] | None = None
    paste_scale: float = 1.0


async def _prepare_inputs(
    loaded: LoadedScenario, sc: Scenario, session: Fetcher, target: Target, tokenizer: Tokenizer
) -> _Inputs:
    """The trace (read again: it was checked when the scenario was loaded), the corpus
    encoded, and the paste budget calibrated against the server's own token count."""
    paste = sc.conversation.turn.paste
    got = _Inputs(
        sc.replay.corpus if sc.replay else paste.corpus if paste else None,
        "tokenizer: local " + tokenizer.name,
    )
    if sc.replay is not None:
        from stress.load.replay import load_trace

        spec = sc.replay
        trace_path = loaded.resolve_trace(spec.trace)
        got.trace = await _prepare(load_trace, trace_path, spec.format, spec.block_size)
    if got.corpus_name is None:
        return got
    got.corpus = await _prepare(Corpus, loaded.resolve(got.corpus_name), tokenizer)
    if sc.target.tokenizer == "tiktoken":
        return got
    # a few thousand characters of real prose (a heading alone would say 1.000)
    sample = "\n\n".join(got.corpus.docs[0].paragraphs)[:4000]
    counted = await server_token_count(session, target.url, target.headers, target.model, sample)
    local = tokenizer.count(sample)
    if counted and local:
        ratio = counted[0] / local
        if 0.3 <= ratio <= 3.0:
            got.paste_scale = 1.0 / ratio
            got.calibration = (
                f"server {counted[1]}: {ratio:.3f} server tokens per {tokenizer.name} token"
            )
    return got


def _header(
    original: Scenario,
    plan: RunPlan,
    target: Target,
    server_kind: str,
    run_dir: Path,
    search: str | None,
) -> dict[str, Any]:
    """What the live view's header shows, sent once when its process starts."""
    sc = plan.first
    return {
        "scenario": sc.name,
        "target": "sim (built-in simulator)" if target.sim else safe_url(target.url),
        "model": target.model,
        "server": server_kind,
        "users": plan.peak,
        "load": _load_text(original, plan),
        "duration_s": sc.duration,
        "rounds": sc.rounds,
        "cache": sc.conversation.cache,
        "run_dir": str(run_dir),
        "slo": sc.slo.model_dump(),  # the badge grades it as the verdict will
        "search": search,
    }


def _worker_config(
    loaded: LoadedScenario,
    plan: RunPlan,
    target: Target,
    nonce: str,
    paste_scale: float,
    corpus_name: str | None,
) -> dict[str, Any]:
    """What every worker runs (``stress.runtime.worker``): the plan's steps as this process runs
    them, the target as resolved here (the key travels on the pipe, never in argv or the
    environment) and the run nonce; the run clock's origin follows when it starts."""
    return {
        "plan": [[label, step.model_dump(mode="json")] for label, step in plan.steps],
        "connections": [plan.connections(plan.worker_users(k)) for k in range(plan.workers)],
        "url": target.url,
        "headers": target.headers,
        "model": target.model,
        "nonce": nonce,
        "paste_scale": paste_scale,
        "corpus": str(loaded.resolve(corpus_name)) if corpus_name else None,
    }


_T = TypeVar("_T")


async def _prepare(step: Callable[..., _T], *args: Any) -> _T:
    """``step(*args, stop=...)`` in a thread: a long preparation (a trace read, a corpus
    encoded) before the run's signal handlers are in place. A Ctrl-C then cancels the
    run's task; the thread cannot be cancelled, and the loop's exit would wait for it, so
    ``stop`` turns true and the step, which polls it, ends within milliseconds."""
    stopping = threading.Event()
    done = asyncio.ensure_future(asyncio.to_thread(step, *args, stop=stopping.is_set))
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        stopping.set()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await done
        raise


def _load_text(sc: Scenario, plan: RunPlan) -> str:
    """``16 users``, ``1-8 users in 8 steps`` (phases), or ``sessions arriving at 30/min
    (poisson)`` (open loop)."""
    a = sc.arrivals
    if sc.replay is not None:
        return f"replay of {Path(sc.replay.trace).name} at speed {sc.replay.speed:g}"
    if a is None:
        least = min(step.users.count for _, step in plan.steps)
        if len(plan.steps) > 1 and least != plan.users:
            return f"{least}-{plan.users} users in {len(plan.steps)} steps"
        return f"{plan.users} users"
    cap = f", at most {a.max_concurrent} at once" if a.max_concurrent else ""
    return f"sessions arriving at {a.rate:g}/min ({a.process}){cap}"


def _recording_error(run_dir: Path, recorder: Recorder) -> RecordingError:
    e = recorder.error
    why = (e.strerror if e is not None else None) or str(e)
    return RecordingError(
        f"cannot write {run_dir}: {why} -- fix: free space or pass --out on another disk; "
        f"{recorder.requests_recorded} records written, {recorder.unwritten_requests} could "
        "not be written"
    )


def _safe_summary(c: Collector, generated_tokens: int) -> dict[str, Any]:
    try:
        if c.name == "gpu":  # energy per generated token needs the run's token count
            return c.summary(total_generated_tokens=generated_tokens)  # type: ignore[call-arg]
        return c.summary()
    except Exception as e:
        return {"error": f"{type(e).__name__}: {REDACTOR.text(str(e))}"}
