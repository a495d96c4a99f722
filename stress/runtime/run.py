"""One run from start to finish: pre-flight, run directory, engine, UI, summary.

This is the only place that wires the pieces together. Whatever happens during the run
(an exception, Ctrl-C, a limit), the ``finally`` path flushes the files, completes the
manifest and writes the summary: a failure is recorded, data already collected is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import re
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

import stress
from stress.collectors.base import Collector, RunClock
from stress.collectors.probe import check_users
from stress.config.plan import RunPlan, plan_run
from stress.config.scenario import LoadedScenario, Scenario, worker_count
from stress.core.errors import RecordingError, RunDirError, StressError
from stress.core.events import QUIET_EVENT_KINDS, RunEvent
from stress.core.secrets import REDACTOR, safe_url
from stress.core.signals import SIGNALS
from stress.core.tokens import get_tokenizer
from stress.live.hangs import GatedSink, HangGate
from stress.live.headless import HeadlessPrinter, UiSink
from stress.live.state import Live
from stress.load.corpus import Corpus
from stress.load.engine import Engine, RunCounters
from stress.net.client import ChatClient
from stress.net.deadlines import TimeoutPolicy
from stress.net.fetch import Fetcher
from stress.runtime.calibrate import server_token_count
from stress.runtime.gpu_discovery import GpuDiscovery
from stress.runtime.preflight import gpu_warnings, preflight
from stress.runtime.target import Target, make_session, open_target
from stress.store.recorder import Recorder, new_run_dir, write_json

if TYPE_CHECKING:  # the end-of-run modules load when the run ends (docs/performance.md)
    from stress.analysis.analyze import Analysis
    from stress.core.tokens import Tokenizer
    from stress.live.metrics_export import MetricsExporter
    from stress.live.view_process import ViewChild
    from stress.load.replay import TraceRequest
    from stress.runtime.pool import WorkerPool
    from stress.runtime.ray_pool import RayLauncher

PACKAGES = (
    "aiohttp",
    "httptools",
    "orjson",
    "numpy",
    "pydantic",
    "tiktoken",
    "uvloop",
    "nvidia-ml-py",
)


class _Stoppable(Protocol):
    """What Ctrl-C, the live view and the flusher stop: the engine, or the worker pool."""

    def request_stop(self, reason: str) -> None: ...

    def cancel_in_flight(self) -> None: ...


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


def versions() -> dict[str, str]:
    """The versions of stress, Python and ``PACKAGES`` as installed, for the manifest.

    Read from the installed ``NAME-VERSION.dist-info`` folders' names (the standard says
    the folder is named so), in ``sys.path`` order as an import would find them: one
    listing per folder. ``importlib.metadata`` (only where a package is installed another
    way) costs ~25 ms on a 2-core machine and ~50 on a slow host, on the way to the first
    request (issue 15)."""
    out = {"stress": stress.__version__, "python": platform.python_version()}
    wanted = {_canonical(name): name for name in PACKAGES}
    found: dict[str, str | None] = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:  # a zip file, or gone
            continue
        for folder in names:
            stem, dot, kind = folder.rpartition(".")
            if not dot or kind not in ("dist-info", "egg-info"):
                continue
            name, _, tail = stem.partition("-")
            key = _canonical(name)
            if key in wanted and key not in found:
                # an egg-info folder's name may carry no version (or a Python tag after it)
                found[key] = tail if kind == "dist-info" and tail else None
    for key, version in found.items():
        name = wanted[key]
        if version is not None:
            out[name] = version
            continue
        import importlib.metadata

        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[name] = importlib.metadata.version(name)
    return {k: out[k] for k in ("stress", "python", *PACKAGES) if k in out}


def platform_text() -> str:
    """``platform.platform()``'s text for the manifest (``Linux-6.8.0-x86_64-with-glibc2.39``)
    without its ``libc_ver()``, which reads the whole Python binary looking for the glibc
    version (5-7 ms on a 2-core machine, more on a slow host, on the way to the first
    request): glibc says its version itself. Elsewhere, ``platform.platform()``."""
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION")  # "glibc 2.39"
    except (AttributeError, ValueError, OSError):  # not glibc, or not POSIX
        libc = None
    if sys.platform != "linux" or not libc:
        return platform.platform()
    u = os.uname()
    name, _, version = libc.partition(" ")
    return f"{u.sysname}-{u.release}-{u.machine}-with-{name}{version}"


def _canonical(name: str) -> str:
    """A distribution's name as the packaging standards compare them."""
    return re.sub(r"[-_.]+", "-", name).lower()


GPU_OPEN_WAIT_S = 1.0
"""The GPU collector opens its cards once the run's first request is written, or this long
after the run clock started at the latest: opening them (pynvml's import, NVML's start and
the cards' handles, in the collector's thread) holds the interpreter in bursts, and delayed
the first request by 59-77 ms in 3 of 4 pinned starts on the H200 host (issue 15).
Its readings, energy included, start then: 150 ms or so after the run clock there either
way, as opening takes that long."""


def _collectors(
    loaded: LoadedScenario,
    recorder: Recorder,
    clock: RunClock,
    session: Fetcher,
    target: Target,
    server_kind: str,
    gate: HangGate,
) -> list[Collector]:
    """The collectors this scenario asks for: the client's own health, server metrics, GPUs."""
    from stress.collectors.client import ClientHealthCollector
    from stress.collectors.gpu import Backend, GpuCollector
    from stress.collectors.server import ServerCollector

    tele = loaded.scenario.telemetry
    out: list[Collector] = [ClientHealthCollector(recorder, clock, tele.interval)]
    if tele.server_metrics:
        out.append(
            ServerCollector(
                GatedSink(recorder, gate),  # its hangs and the client's are one count
                clock,
                tele.interval,
                session=session,
                base_url=target.url,
                headers=target.headers,
                kind=server_kind,
                hang_after_s=tele.hang_after,
            )
        )
    if tele.gpus != "off":
        selection = None if tele.gpus == "auto" else list(tele.gpus)
        backends: list[Backend] | None = None  # real cards: NVML, hwmon
        if target.sim is not None:  # the simulator's simulated cards only, never real ones
            from stress.collectors.gpu.simulated import SimGpuBackend

            backends = [SimGpuBackend(target.url)]
        gpu = GpuCollector(
            recorder, clock, tele.interval, selection, backends, time_scale=target.time_scale
        )
        out.append(gpu)
    return out


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
) -> RunOutcome:
    """Run the scenario once into a new run directory under ``out_dir``; ``search`` is
    where a capacity search stands (the live view's header shows it); ``metrics``, when
    given, serves the run's live Prometheus metrics (``stress.live.metrics_export``); ``ray``,
    when given, runs the workers as actors of the Ray cluster at that address (``""``:
    the one this machine belongs to; ``stress.runtime.ray_pool``); ``gpu_discovery``: the GPU
    pre-flight already started (else it starts now); ``view``: with ``ui="tui"``, the live
    view's process already started (else the run starts it)."""
    session = make_session(loaded.scenario.timeouts.connect)
    found = gpu_discovery or GpuDiscovery()
    gpu = asyncio.ensure_future(found.result())  # NVML in a child process, meanwhile
    try:
        async with open_target(loaded, session) as target:
            return await _run(
                loaded,
                out_dir,
                session,
                target,
                progress_interval,
                ui,
                search,
                metrics,
                ray,
                gpu,
                view,
            )
    finally:
        if not gpu.done():
            gpu.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await gpu
        found.discard()
        await session.close()


async def _run(
    loaded: LoadedScenario,
    out_dir: Path,
    session: Fetcher,
    target: Target,
    progress_interval: float | None,
    ui: Literal["headless", "tui"],
    search: str | None = None,
    metrics: MetricsExporter | None = None,
    ray: str | None = None,
    gpu: asyncio.Future[dict[str, Any]] | None = None,
    view: ViewChild | None = None,
) -> RunOutcome:
    original = loaded.scenario
    run_plan = plan_run(original, target.time_scale, os.cpu_count())
    plan = list(run_plan.steps)  # what the engine runs, step by step, in wall seconds
    sc = run_plan.first
    tokenizer = get_tokenizer()
    inputs = await _prepare_inputs(loaded, sc, session, target, tokenizer)
    corpus, trace, corpus_name = inputs.corpus, inputs.trace, inputs.corpus_name
    paste_scale, calibration = inputs.paste_scale, inputs.calibration
    probe_result, probe_warnings = await preflight(
        session,
        target.url,
        target.headers,
        sc.conversation.ceiling_tokens,
        sc.request.max_tokens,
    )
    answered = _gpu_answer(gpu) if gpu is not None else None
    if answered is not None:
        probe_result = probe_result.model_copy(update={"gpu": answered})
        probe_warnings += gpu_warnings(answered)
        gpu = None  # else it joins the manifest and the events when it answers
    probe_warnings += check_users(probe_result, run_plan.peak)
    server_kind = sc.target.server
    if server_kind == "auto" and probe_result.kind in ("vllm", "sglang", "llamacpp"):
        server_kind = probe_result.kind
    nonce = uuid.uuid4().hex[:10]
    counters = RunCounters()
    n_workers = run_plan.workers
    launcher: RayLauncher | None = None
    if ray is not None:
        from stress.runtime.ray_pool import RayLauncher

        launcher = RayLauncher.connect(ray or None)  # one line when it cannot
        run_plan = run_plan.with_workers(worker_count(original, launcher.cpus))
        n_workers = run_plan.workers
        try:
            launcher.check(n_workers, target.url)
        except StressError:
            await launcher.close()  # leave the cluster before saying why
            raise
    pool: WorkerPool | None = None
    if n_workers > 1 or launcher is not None:  # started and set up before the run clock
        if launcher is None:
            _check_shared_clock()
        from stress.runtime.pool import WorkerPool

        pool = WorkerPool(
            n_workers,
            run_plan.users,
            sc.limits,
            counters,
            lambda reason: printer.line(
                f"[{clock.now():6.1f}s] stopping ({reason}): no new turns; finishing "
                "requests in flight"
            ),
            launcher,
        )
        try:
            await pool.start(
                _worker_config(loaded, run_plan, target, nonce, paste_scale, corpus_name)
            )
        except BaseException:
            await pool.abort()
            raise
    try:
        run_dir = new_run_dir(out_dir, sc.name)
    except OSError as e:
        if pool is not None:
            await pool.abort()
        raise RunDirError(
            f"cannot create a run directory in {out_dir}: {e.strerror or e} -- fix: pass --out "
            "with a writable folder"
        ) from None
    live = Live(
        run_plan.users,
        time_scale=target.time_scale,
    )
    clock = RunClock.start()
    engine_ref: list[_Stoppable] = []
    printer: UiSink
    if ui == "tui":
        from stress.live.view_process import TuiProcess  # the view's own process draws it

        header = _header(original, run_plan, target, server_kind, run_dir, search)
        printer = TuiProcess(
            header,
            lambda rows=None: live.snapshot(clock.now(), rows),
            on_quit=lambda: engine_ref[0].request_stop("interrupted"),
            on_cancel=lambda: engine_ref[0].cancel_in_flight(),
            child=view,
        )
    else:
        printer = HeadlessPrinter(
            lambda: live.snapshot(clock.now()),
            sc.duration,
            progress_interval or (5.0 if (sc.duration or 0) <= 900 else 15.0),
        )

    def on_event(ev: RunEvent) -> None:
        if ev.kind in QUIET_EVENT_KINDS:  # one per session: in events.jsonl, not shown
            return
        live.on_event(ev)
        printer.on_event(ev)

    if metrics is None:
        recorder = Recorder(run_dir, on_event=on_event, clock=clock.now)
    else:  # each accepted request record also feeds the live metrics
        recorder = metrics.recorder(run_dir, on_event=on_event, clock=clock.now)
    manifest: dict[str, Any] = {
        "run_id": run_dir.name,
        "scenario": original.model_dump(mode="json"),
        "time_scale": target.time_scale,
        "scenario_file": str(loaded.path),
        "scenario_sha256": loaded.sha256,
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
        "tokenizer": tokenizer.name,
        "token_budget": calibration,
        "paste_scale": paste_scale,
        "server_kind": server_kind,
        "probe": probe_result.to_dict(),
        "probe_warnings": probe_warnings,
        "cache_isolation": f"run nonce {nonce} in every prompt's opening marker",
        "workers": n_workers,
        "plan": run_plan.manifest(),
        **({"worker_pids": [w.pid for w in pool.workers]} if pool is not None else {}),
        **({"worker_details": pool.details()} if pool is not None else {}),
        **({"ray": {"address": launcher.address, "nodes": launcher.nodes()}} if launcher else {}),
        "start_time": clock.wall_t0,
        "end_time": None,
        "exit_reason": None,
        "command": [os.path.basename(sys.argv[0]), *sys.argv[1:]],
        **({"metrics_url": metrics.url} if metrics is not None else {}),
    }
    try:
        write_json(run_dir / "manifest.json", manifest)
    except OSError as e:
        if pool is not None:
            await pool.abort()
        raise RecordingError(
            f"cannot write {run_dir}: {e.strerror or e} -- fix: free space or pass --out on "
            "another disk; nothing was sent"
        ) from None
    client = ChatClient(
        target.url,
        target.headers,
        TimeoutPolicy(
            sc.timeouts.connect, sc.timeouts.first_token, sc.timeouts.stall, sc.timeouts.total
        ),
        limit=run_plan.connections(),
        reuse=sc.connection.reuse,
        clock_t0=clock.t0_ns / 1e9,
    )

    def make_engine(label: str, step: Scenario) -> Engine:
        def on_stop(reason: str) -> None:
            what = "stopping" if label == "main" else f"phase {label} ends"
            printer.line(
                f"[{clock.now():6.1f}s] {what} ({reason}): no new turns; finishing requests "
                "in flight"
            )

        engine = Engine(
            step,
            client,
            recorder,
            live,
            corpus,
            target.model,
            nonce,
            clock.t0_ns / 1e9,
            paste_scale=paste_scale,
            on_stop=on_stop,
            phase=label,
            counters=counters,
            trace=trace,
        )
        engine_ref[:] = [engine]
        return engine

    if pool is not None:
        pool.attach(recorder, live, clock)
        engine_ref[:] = [pool]
    else:
        engine = make_engine(*plan[0])
    gate = HangGate(recorder.event)

    def last_byte() -> float:  # when any stream of the run last received bytes
        return max(client.last_byte, pool.last_byte) if pool is not None else client.last_byte

    collectors = _collectors(loaded, recorder, clock, session, target, server_kind, gate)
    stop_bg = asyncio.Event()
    background = [
        asyncio.create_task(
            _flusher(recorder, stop_bg, lambda: engine_ref[0].request_stop("recorder_failed"))
        )
    ]
    background.append(asyncio.create_task(printer.run(stop_bg)))
    background += [
        asyncio.create_task(
            _run_collector(
                c,
                recorder,
                clock,
                stop_bg,
                # one process sends: its first request first (workers: their own processes)
                after=client.first_written if c.name == "gpu" and pool is None else None,
            )
        )
        for c in collectors
    ]
    background.append(
        asyncio.create_task(
            _monitor(
                live,
                collectors,
                last_byte,
                gate,
                clock,
                sc.telemetry.hang_after,
                stop_bg,
            )
        )
    )
    if gpu is not None:

        def gpu_found(found: dict[str, Any]) -> None:
            manifest["probe"]["gpu"] = found
            warnings = gpu_warnings(found)
            manifest["probe_warnings"] += warnings
            for warning in warnings:
                recorder.event(
                    RunEvent(clock.now(), "preflight", warning, "warning", source="server")
                )
            _guarded(
                printer, "manifest.json", lambda: write_json(run_dir / "manifest.json", manifest)
            )

        background.append(asyncio.create_task(_late_gpu(gpu, stop_bg, gpu_found)))
    interrupts = 0

    def on_sigint() -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts == 1:
            engine_ref[0].request_stop("interrupted")
            printer.line("Ctrl-C: finishing requests in flight; Ctrl-C again cancels them")
        else:
            engine_ref[0].cancel_in_flight()

    give_back_signals = SIGNALS.take(on_sigint)
    printer.line(
        f"stress {stress.__version__}: {sc.name} -> {manifest['target_url']} model "
        f"{target.model}, {_load_text(original, run_plan)}, cache {sc.conversation.cache}; "
        f"writing {run_dir}"
    )
    if metrics is not None:
        from stress.live.metrics_export import RunInfo

        metrics.start_run(
            RunInfo(
                sc.name,
                run_dir.name,
                target.model,
                "sim" if target.sim else server_kind,
                run_plan.peak,
                target.time_scale,
                in_flight=lambda: live.in_flight,
                client_health=lambda: live.collectors.get("client"),
                elapsed=clock.now,
            )
        )
        printer.line(f"live metrics: {metrics.url} (Prometheus; docs/live-metrics.md)")
    recorder.event(
        RunEvent(
            clock.now(),
            "run_started",
            f"{sc.name}: {_load_text(original, run_plan)}",
            "info",
            data={"run_nonce": nonce},
        )
    )
    for warning in probe_warnings:
        recorder.event(RunEvent(clock.now(), "preflight", warning, "warning", source="server"))
    started = getattr(printer, "started", None)
    if started is not None:  # the live view has its header (not its first screen: its own
        with contextlib.suppress(TimeoutError):  # process draws it, not this loop)
            await asyncio.wait_for(started.wait(), timeout=10)
    exit_reason = "crashed"
    try:
        for i, (label, step) in enumerate(plan):
            if i:
                if interrupts:
                    break
                if pool is None:
                    engine = make_engine(label, step)
                recorder.event(
                    RunEvent(
                        clock.now(),
                        "phase_started",
                        f"phase {label}: {step.users.count} users",
                        "info",
                        data={"phase": label},
                    )
                )
            if pool is not None:
                exit_reason = await pool.run_phase(i)
            else:
                exit_reason = (await engine.run()).exit_reason
            if exit_reason not in ("duration", "rounds", "done"):
                break
    except BaseException as e:
        recorder.event(RunEvent(clock.now(), "run_crashed", f"{type(e).__name__}: {e}", "error"))
        raise
    finally:
        if pool is not None:  # every worker's last records before the files close
            await pool.close()
        give_back_signals()
        stop_bg.set()
        await asyncio.gather(*background, return_exceptions=True)
        await client.close()
        recorder.close()  # never raises: a failed write is in recorder.error
        if metrics is not None:
            metrics.end_run()
        if recorder.error is not None:
            exit_reason = "recorder_failed"
        manifest["end_time"] = time.time()
        manifest["duration_s"] = clock.now()
        manifest["exit_reason"] = exit_reason
        results = {c.name: _safe_summary(c, live.completion_tokens) for c in collectors}
        if pool is not None:  # the client is every process: the parent and its workers
            from stress.collectors.client import merge_health

            results["workers"] = pool.health()
            results["client"] = merge_health([results["client"], *results["workers"].values()])
        # the manifest stays provenance; what the collectors measured is a result
        _guarded(
            printer, "collectors.json", lambda: write_json(run_dir / "collectors.json", results)
        )
        _guarded(printer, "manifest.json", lambda: write_json(run_dir / "manifest.json", manifest))
        if pool is not None:
            await pool.reap()
    if recorder.error is not None:
        raise _recording_error(run_dir, recorder)
    from stress.analysis.analyze import analyze  # not before: nothing in the run needs them
    from stress.report.summary import build_summary, render_summary

    summary: dict[str, Any] = {}
    analysis: list[Analysis] = []  # read and analysed once, for summary.json and the report
    if _guarded(printer, "summary.json", lambda: analysis.append(analyze(run_dir))) and _guarded(
        printer, "summary.json", lambda: summary.update(build_summary(run_dir, analysis[0]))
    ):
        print(REDACTOR.text(f"\n{render_summary(summary)}\n\nrun directory: {run_dir}"), flush=True)
        _write_report(run_dir, analysis[0])
    return RunOutcome(run_dir, summary, exit_reason)


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


def _guarded(printer: UiSink, what: str, write: Callable[[], object]) -> bool:
    """Write one end-of-run file; a failure is one line, never a traceback past the user."""
    try:
        write()
        return True
    except OSError as e:
        printer.line(f"{what} not written: {REDACTOR.text(str(e.strerror or e))}")
        return False


def _recording_error(run_dir: Path, recorder: Recorder) -> RecordingError:
    e = recorder.error
    why = (e.strerror if e is not None else None) or str(e)
    return RecordingError(
        f"cannot write {run_dir}: {why} -- fix: free space or pass --out on another disk; "
        f"{recorder.requests_recorded} records written, {recorder.unwritten_requests} could "
        "not be written"
    )


def _write_report(run_dir: Path, analysis: Analysis) -> None:
    """report.md and report.html beside the data; a failure here never costs the run."""
    try:
        from stress.report.build import build_report

        _, _, html = build_report(run_dir, analysis)
    except Exception as e:
        print(
            f"report not written ({type(e).__name__}: {REDACTOR.text(str(e))}); "
            f"`stress report {run_dir}` retries",
            flush=True,
        )
        return
    print(f"report: {html}", flush=True)


def _safe_summary(c: Collector, generated_tokens: int) -> dict[str, Any]:
    try:
        if c.name == "gpu":  # energy per generated token needs the run's token count
            return c.summary(total_generated_tokens=generated_tokens)  # type: ignore[call-arg]
        return c.summary()
    except Exception as e:
        return {"error": f"{type(e).__name__}: {REDACTOR.text(str(e))}"}


async def _flusher(recorder: Recorder, stop: asyncio.Event, on_failure: Callable[[], None]) -> None:
    """Flush once a second; a write that fails (the recorder keeps the lines and shows a
    ``recorder_failed`` event) stops the run: no new turns, requests in flight finish."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=1.0)
        if not recorder.flush():
            on_failure()


LATE_GPU_WAIT_S = 10.0
"""How long the end of a run waits for a GPU pre-flight that has not answered yet."""


async def _late_gpu(
    gpu: asyncio.Future[dict[str, Any]],
    stop: asyncio.Event,
    found: Callable[[dict[str, Any]], None],
) -> None:
    """Hand the GPU pre-flight's answer to ``found`` when it comes; at the run's end wait
    for it at most ``LATE_GPU_WAIT_S`` more, then say it did not answer."""
    stopped: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
    either: set[asyncio.Future[Any]] = {gpu, stopped}
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if not gpu.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(gpu), LATE_GPU_WAIT_S)
    finally:
        stopped.cancel()
    answer = _gpu_answer(gpu)
    found(
        answer
        if answer is not None
        else {"summary": "GPU discovery had not answered when the run ended"}
    )


def _gpu_answer(gpu: asyncio.Future[dict[str, Any]]) -> dict[str, Any] | None:
    """The GPU pre-flight's answer, if it has given one."""
    if gpu.done() and not gpu.cancelled() and gpu.exception() is None:
        return gpu.result()
    return None


async def _run_collector(
    c: Collector,
    recorder: Recorder,
    clock: RunClock,
    stop: asyncio.Event,
    after: asyncio.Event | None = None,
) -> None:
    """A collector's task; one that dies says so (``collector_failed``) instead of vanishing.
    With ``after``, it starts once that is set (or ``stop``), ``GPU_OPEN_WAIT_S`` at the most."""
    try:
        if after is not None:  # or the run ends first
            waits = [asyncio.ensure_future(e.wait()) for e in (after, stop)]
            try:
                await asyncio.wait(waits, timeout=GPU_OPEN_WAIT_S, return_when="FIRST_COMPLETED")
            finally:
                for w in waits:
                    w.cancel()
        await c.run(stop)
    except asyncio.CancelledError:
        raise
    except Exception as e:
        recorder.event(
            RunEvent(
                clock.now(),
                "collector_failed",
                f"collector {c.name} stopped: {type(e).__name__}: {e}; its telemetry ends here",
                "error",
                source=c.name,
                data={"collector": c.name},
            )
        )


async def _monitor(
    live: Live,
    collectors: list[Collector],
    last_byte: Callable[[], float],
    gate: HangGate,
    clock: RunClock,
    hang_after: float,
    stop: asyncio.Event,
) -> None:
    """Once a second: copy collectors' live views into the live state, and watch for a
    hang seen from the client side (requests in flight, not a byte on any stream), which
    a restart counter alone would miss (field note 5)."""
    hung_since: float | None = None
    busy_since: float | None = None
    while not stop.is_set():
        for c in collectors:
            with contextlib.suppress(Exception):
                live.collectors[c.name] = c.live()
        now = time.perf_counter()
        if live.in_flight == 0:
            busy_since = None
        elif busy_since is None:
            busy_since = now
        quiet = now - max(last_byte(), busy_since or now)
        if live.in_flight > 0 and quiet >= hang_after:
            if hung_since is None:
                hung_since = clock.now() - quiet
                gate.event(
                    RunEvent(
                        clock.now(),
                        "hang_suspected",
                        f"{live.in_flight} request(s) in flight and no bytes on any stream for "
                        f"{quiet:.0f}s: the server may be hung (restart counters would not show "
                        "this)",
                        "error",
                        source="client",
                    )
                )
        elif hung_since is not None and quiet < hang_after:
            gate.event(
                RunEvent(
                    clock.now(),
                    "hang_cleared",
                    f"bytes flowing again after {clock.now() - hung_since:.0f}s",
                    "warning",
                    source="client",
                )
            )
            hung_since = None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=1.0)
