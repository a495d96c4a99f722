"""The whole tool, end to end: the real ``stress run`` CLI against a plain reference loop.

Why: the other benchmarks time ``ChatClient`` alone; users run ``stress run``, which pays
per-request costs on top (corpus excerpts and token counts, conversation bookkeeping, the
body, the record, the live state, the collectors). Here every figure is a ratio measured
side by side in one command: the same target, the same streams, the same seconds, taken in
turn by

- **reference**: ``benchmarks/reference_client.py``, a plain aiohttp + orjson + uvloop
  loop (no stress code), ``--streams`` closed-loop streams; and
- **stress**: ``python -m stress run SCENARIO --no-tui --users K --duration T`` in its own
  process, the scenario a closed loop (zero think time, a 150-250-token corpus paste and a
  question every turn), telemetry off (no server metrics, no GPUs; the client-health
  collector always runs), the target's model named (no guessing). Both targets report
  1,000 prompt tokens, over the 1,024-token ceiling with the reply, so every turn opens a
  new conversation: each request is a system prompt, a paste and a question (~250 tokens,
  printed as ``prompt``); the reference sends a fixed ``--prompt-tokens`` body (250);
- **stress+tui**: the same command without ``--no-tui`` in a pseudo-terminal of
  ``--tui-size``, so the live view really renders (the bytes it wrote are counted).

Each process is pinned to ``--client-cpu`` (``taskset``); the targets run on
``--server-cpu``; the live view's process (which inherits the run's pinning) is moved to
``--view-cpu``, by default a core of its own where there is one, as the OS would place it
in a user's run; this script keeps off the client core. Its CPU (user + system, the
process and its children) and RSS are sampled from outside with psutil every 50 ms, the
same way for every client, and so is the client core's busy time: what other processes
took of that core is printed as ``others on its core`` (a shared machine shows there).
Requests come from the run's own files (``requests.jsonl``, the run clock mapped to wall
time by ``manifest.json``'s ``start_time``) or the reference's record file.

**Steady state** (every figure but "whole") is the window from the first request's send
plus ``--warmup`` to the last request's send (when the run stopped starting turns): the
CPU spent in it, and each request counted for the share of its life inside it, its chunks
likewise (spread evenly over its life: exact for paced replies, and no window edge cuts a
generation of one-second paced requests in two). **Whole command** adds start-up
(imports, scenario, corpus, probe: everything before the first request), warm-up, the
drain and the end of the run (summary, analysis, ``report.html``); its CPU is the
process's exact ``wait4`` rusage. Chunks are SSE events carrying JSON (content and
usage), counted alike for both clients.

Parts (``--parts``, all by default):

- ``burst``: nginx (``apt-get install -y nginx``) serves a static vLLM-shaped reply of
  ``--chunks`` chunks, many per network read; at each ``--streams`` level requests/s and
  chunks per CPU-second, the ratio stress/reference. With ``--short-chunks`` (default 16)
  each level also runs a short reply, which splits the CPU into a per-request and a
  per-chunk part (cpu per request = a + b x chunks per request, from the two lengths).
- ``paced``: ``paced_server.py`` writes one chunk per read every 10 ms, ``--paced-streams``
  streams of 100-chunk replies for ``--paced-duration`` seconds: CPU us per chunk, ratio;
  with ``--paced-short-chunks`` (default 25) the same split per request and per chunk. Once
  per ``--paced-clock``: ``stream`` (each stream paced from its own request's arrival) and
  ``step`` (one decode step for every stream, as a batching server writes an engine step);
  under each run, the paced server's wakes and CPU over it (the client's wakes follow the
  server's, and with the ``stream`` clock the server's follow the client's timing).
- ``tui``: adds a ``stress+tui`` run to the first burst level and to paced, per repeat.
- ``rss``: RSS of the headless stress process at ``--rss-streams`` (256) streams, burst:
  when the first request went out, the steady peak, and the whole command's peak (the
  end-of-run report is part of it); taken from the burst runs when that level is among
  ``--streams``. Every run line shows the three as ``rss start/steady/peak``.
- ``start``: from launching ``stress run scenarios/quickstart.yaml --target URL`` to the
  first chat request arriving at the paced server (its log, on the monotonic clock both
  processes share), split at the run clock's start; and the wall time of
  ``stress --help``, ``stress run --help`` and a bare ``python -c pass``.

Every figure is a mean ± sd (min-max, n) over ``--repeat`` repeats; ratios are taken per
repeat (the two runs next to each other) and then averaged. On a shared machine, wall
figures (requests/s) move with whatever else runs; CPU-per-unit figures are steadier.

Last, one block judges issue 15's targets (``benchmarks/targets.py``, where each line is
defined) from this command's figures: the line, the mean ± sd, how many repeats fell on
the right side of it, met or not; the paced target under the ``step`` clock, the
``stream`` clock's figure beside it, reported; any target a left-out part would measure
is named, never counted as met.

    .venv/bin/python benchmarks/e2e.py                          # 64 streams, 3 repeats
    .venv/bin/python benchmarks/e2e.py --streams 64 256 1024 2000 --duration 20 --warmup 4
    .venv/bin/python benchmarks/e2e.py --parts start --repeat 5
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import pty
import select
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from fcntl import ioctl
from pathlib import Path
from termios import TIOCSWINSZ

import orjson
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (
    machine,
    mean_spread,
    nginx,
    paced_server,
    request_body,
    sse_body,
)
from benchmarks.paced_server import MODEL, MODELS
from benchmarks.targets import Targets

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = Path(__file__).with_name("reference_client.py")
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
PACED = {"first_ms": 10.0, "chunks": 100, "gap_ms": 10.0, "prompt_tokens": 1000}
"""What every paced request asks ``paced_server.py`` for: 100 chunks, one per 10 ms, and a
usage chunk saying 1,000 prompt tokens, as nginx's static reply does."""

SCENARIO = """\
name: e2e_{name}
target:
  url: {url}
  model: {model}
  server: openai          # a static file server: no kind to detect
  tokenizer: tiktoken     # nor a tokenize endpoint to calibrate against
users: {{count: 1, ramp_up: {ramp}, think_time: {{min: 0s, max: 0s}}}}
duration: 10s
conversation:
  cache: per_user
  ceiling_tokens: 1024
  turn:
    paste: {{corpus: bundled:en, tokens: [150, 250]}}
    ask: [Summarise the main points of this document., What matters most here?]
request: {{max_tokens: {max_tokens}, extra_body: {extra}}}
warmup: {{rounds: 0}}
timeouts: {{drain: 30s}}
telemetry: {{server_metrics: false, gpus: "off"}}
"""


# --- sampling a process from outside ---------------------------------------------------


class Sampler:
    """CPU (user + system, the process and its children) and RSS of one process, every
    ``interval`` seconds, stamped with wall time, in a thread of this process."""

    def __init__(
        self, pid: int, core: int | None, view_core: int | None = None, interval: float = 0.05
    ) -> None:
        self.proc = psutil.Process(pid)
        self.core = core
        self.view_core = view_core
        """Where the live view's process is moved once found (it inherits the run's
        pinning; a user's run has the OS put it on another core)."""
        self.interval = interval
        self.samples: list[tuple[float, float, float]] = []
        """(wall time, CPU seconds so far, RSS MiB): the process and its children but the
        live view's."""
        self.view: list[tuple[float, float]] = []
        """(wall time, CPU seconds so far) of the live view's process (``stress.tui.child``),
        apart: it draws on its own process, not on the run's loop."""
        self.cores: list[tuple[float, float]] = []
        """(wall time, busy seconds of the client's core so far, all processes)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        children: list[psutil.Process] = []
        views: set[int] = set()
        view_last: dict[int, float] = {}  # a view that exited keeps its last reading
        next_scan = 0.0
        while not self._stop.is_set():
            now = time.time()
            try:
                if now >= next_scan:  # a /proc scan: once a second, not every sample
                    children = self.proc.children(recursive=True)
                    for c in children:
                        with contextlib.suppress(psutil.Error):
                            if c.pid not in views and "stress.tui.child" in c.cmdline():
                                views.add(c.pid)
                                if self.view_core is not None:
                                    c.cpu_affinity([self.view_core])
                    next_scan = now + 1.0
                with self.proc.oneshot():
                    t = self.proc.cpu_times()
                    rss = self.proc.memory_info().rss
                cpu = t.user + t.system
                for c in children:
                    with contextlib.suppress(psutil.Error):
                        ct = c.cpu_times()
                        if c.pid in views:
                            view_last[c.pid] = ct.user + ct.system
                        else:
                            cpu += ct.user + ct.system
            except psutil.Error:  # it has exited (or is a zombie)
                return
            self.samples.append((now, cpu, rss / (1 << 20)))
            self.view.append((now, sum(view_last.values())))
            if self.core is not None:
                c = psutil.cpu_times(percpu=True)[self.core]
                busy = c.user + c.nice + c.system  # guest time is inside user already
                busy += getattr(c, "irq", 0.0) + getattr(c, "softirq", 0.0)
                self.cores.append((now, busy + getattr(c, "steal", 0.0)))
            self._stop.wait(self.interval)

    def cpu_at(self, t: float) -> float:
        """CPU seconds used by wall time ``t`` (linear between samples)."""
        return _at([(w, c) for w, c, _ in self.samples], t)

    def view_at(self, t: float) -> float:
        """CPU seconds the live view's process used by wall time ``t``."""
        return _at(self.view, t)

    def core_at(self, t: float) -> float:
        """Busy seconds of the client's core by wall time ``t``, whoever used it."""
        return _at(self.cores, t)

    def rss_peak(self, lo: float = -math.inf, hi: float = math.inf) -> float:
        return max((r for t, _, r in self.samples if lo <= t <= hi), default=float("nan"))


def _at(s: list[tuple[float, float]], t: float) -> float:
    """A cumulative series at ``t``, linear between samples."""
    if not s:
        return 0.0
    if t <= s[0][0]:
        return s[0][1]
    if t >= s[-1][0]:
        return s[-1][1]
    lo, hi = 0, len(s) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if s[mid][0] <= t:
            lo = mid
        else:
            hi = mid
    (t0, c0), (t1, c1) = s[lo], s[hi]
    return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else c0


@dataclass(slots=True)
class Proc:
    """One finished client process."""

    rc: int
    t_launch: float
    """Wall time just before the fork."""
    t_launch_perf: float
    wall_s: float
    cpu_s: float
    """User + system of the process and its waited-for children (``wait4`` rusage)."""
    sampler: Sampler
    tty: bool = False
    tty_bytes: int = 0
    """All it wrote (to the terminal, or to the pipe)."""
    output: bytes = b""


def launch(
    cmd: list[str],
    cpu: int | None,
    tty: tuple[int, int] | None,
    timeout: float,
    view_cpu: int | None = None,
) -> Proc:
    """Run ``cmd`` (pinned to ``cpu``), sampled from outside; stdout kept (the last 64 KiB)
    or, with ``tty`` (columns, rows), attached to a pseudo-terminal of that size; a live
    view's process it starts is moved to ``view_cpu``."""
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]  # taskset execs: the pid stays the client's
    out = bytearray()
    total = [0]
    master = -1
    if tty is not None:
        master, slave = pty.openpty()
        cols, rows = tty
        ioctl(slave, TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        env = os.environ | {"TERM": "xterm-256color", "COLUMNS": str(cols), "LINES": str(rows)}
        t_launch, t_perf = time.time(), time.perf_counter()
        popen = subprocess.Popen(
            cmd, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True
        )
        os.close(slave)
    else:
        t_launch, t_perf = time.time(), time.perf_counter()
        popen = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        assert popen.stdout is not None
        master = popen.stdout.fileno()

    def drain() -> None:
        while True:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if popen.returncode is not None:
                    return
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the terminal's other side closed
                return
            if not chunk:
                return
            total[0] += len(chunk)
            out.extend(chunk)
            del out[: max(0, len(out) - 65536)]

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    with Sampler(popen.pid, cpu, view_cpu) as sampler:
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(popen.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                popen.kill()
                pid, status, usage = os.wait4(popen.pid, 0)
                break
            time.sleep(0.02)
    wall = time.perf_counter() - t_perf
    popen.returncode = os.waitstatus_to_exitcode(status)
    reader.join(5)
    if tty is not None:
        with contextlib.suppress(OSError):
            os.close(master)
    elif popen.stdout is not None:
        popen.stdout.close()
    return Proc(
        popen.returncode,
        t_launch,
        t_perf,
        wall,
        usage.ru_utime + usage.ru_stime,
        sampler,
        tty is not None,
        total[0],
        bytes(out),
    )


# --- one measured run ----------------------------------------------------------------


@dataclass(slots=True)
class Run:
    """What one client did, steady state and whole command."""

    who: str
    streams: int
    window_s: float = 0.0
    requests: float = 0.0
    """Requests in the steady window, each counted for the share of its life inside it."""
    chunks: float = 0.0
    """Chunks in the window, likewise (a request's chunks spread evenly over its life)."""
    errors: int = 0
    cpu_s: float = 0.0
    others_pct: float = 0.0
    """Busy time of the client's core not spent by the client, % of the window (other
    processes on a shared machine; 0 when unpinned)."""
    whole_wall_s: float = 0.0
    whole_cpu_s: float = 0.0
    whole_requests: int = 0
    whole_chunks: int = 0
    startup_s: float = 0.0
    """Launch to the first request's send."""
    startup_cpu_s: float = 0.0
    tail_s: float = 0.0
    """The last request's end to the process's exit (summary, analysis, report)."""
    tail_cpu_s: float = 0.0
    rss_start_mib: float = 0.0
    """RSS when the first request went out (imports, tokenizer, corpus, pool)."""
    rss_steady_mib: float = 0.0
    rss_peak_mib: float = 0.0
    prompt_tokens: float = 0.0
    """Mean prompt size sent (stress: its own estimate; reference: the fixed body's)."""
    tty_bytes: int = 0
    view_cpu_s: float = 0.0
    """CPU of the live view's own process in the window (not in ``cpu_s``)."""
    notes: list[str] = field(default_factory=list)

    @property
    def req_s(self) -> float:
        return self.requests / self.window_s if self.window_s else 0.0

    @property
    def chunks_per_cpu_s(self) -> float:
        return self.chunks / self.cpu_s if self.cpu_s else 0.0

    @property
    def us_per_chunk(self) -> float:
        return 1e6 * self.cpu_s / self.chunks if self.chunks else 0.0

    @property
    def us_per_request(self) -> float:
        return 1e6 * self.cpu_s / self.requests if self.requests else 0.0

    @property
    def chunks_per_request(self) -> float:
        return self.chunks / self.requests if self.requests else 0.0

    @property
    def cpu_pct(self) -> float:
        return 100 * self.cpu_s / self.window_s if self.window_s else 0.0

    @property
    def view_pct(self) -> float:
        return 100 * self.view_cpu_s / self.window_s if self.window_s else 0.0

    @property
    def us_per_chunk_with_view(self) -> float:
        return 1e6 * (self.cpu_s + self.view_cpu_s) / self.chunks if self.chunks else 0.0

    def line(self) -> str:
        return (
            f"  {self.who:<10} {self.streams:5d} streams: {self.req_s:8,.1f} req/s "
            f"{self.chunks / max(self.window_s, 1e-9):9,.0f} chunks/s "
            f"{self.chunks_per_cpu_s:9,.0f} chunks/cpu-s {self.us_per_chunk:6.2f} us/chunk "
            f"{self.us_per_request:7,.0f} us/req cpu {self.cpu_pct:5.1f}% "
            f"(others on its core {self.others_pct:4.1f}%) "
            f"[{self.requests:,.0f} req {self.errors} err in {self.window_s:.1f}s] "
            f"rss {self.rss_start_mib:.0f}/{self.rss_steady_mib:.0f}/{self.rss_peak_mib:.0f} "
            "MiB | whole: "
            f"{self.whole_wall_s:.1f}s {self.whole_cpu_s:.2f} cpu-s, start "
            f"{self.startup_s:.2f}s/{self.startup_cpu_s:.2f} cpu-s, end "
            f"{self.tail_s:.2f}s/{self.tail_cpu_s:.2f} cpu-s"
            + (f", tty {self.tty_bytes / 1024:,.0f} KiB" if self.tty_bytes else "")
            + (f"; view process {self.view_pct:.1f}% of a core" if self.view_cpu_s else "")
            + f"; prompt ~{self.prompt_tokens:,.0f} tok"
            + (f" ({'; '.join(self.notes)})" if self.notes else "")
        )


Rec = tuple[float, float, int, bool]
"""One finished request: wall start, wall end, JSON chunks, ok."""


def measure(who: str, streams: int, proc: Proc, recs: list[Rec], warmup: float) -> Run:
    """The steady window and the whole command of one client process."""
    run = Run(who, streams, whole_wall_s=proc.wall_s, whole_cpu_s=proc.cpu_s)
    run.tty_bytes = proc.tty_bytes if proc.tty else 0
    run.whole_requests = len(recs)
    run.whole_chunks = sum(r[2] for r in recs)
    s = proc.sampler
    run.rss_peak_mib = s.rss_peak()
    if not recs:
        run.notes.append(f"no requests; exit {proc.rc}")
        return run
    first = min(r[0] for r in recs)
    lo, hi = first + warmup, max(r[0] for r in recs)
    last_end = max(r[1] for r in recs)
    run.window_s = max(0.0, hi - lo)
    for start, end, chunks, ok in recs:
        # the share of the request's life inside the window: its chunks are spread over it
        # (paced: one every 10 ms), so a window edge cuts no generation of requests in two
        share = max(0.0, min(end, hi) - max(start, lo)) / max(end - start, 1e-9)
        run.requests += share
        run.chunks += share * chunks
        if not ok and lo <= end < hi:
            run.errors += 1
    run.cpu_s = s.cpu_at(hi) - s.cpu_at(lo)
    run.view_cpu_s = s.view_at(hi) - s.view_at(lo)
    busy = s.core_at(hi) - s.core_at(lo) - run.cpu_s - run.view_cpu_s
    run.others_pct = 100 * max(0.0, busy) / run.window_s
    run.startup_s = first - proc.t_launch
    run.startup_cpu_s = s.cpu_at(first)
    run.tail_s = proc.t_launch + proc.wall_s - last_end
    run.tail_cpu_s = max(0.0, proc.cpu_s - s.cpu_at(last_end))
    run.rss_steady_mib = s.rss_peak(lo, hi)
    run.rss_start_mib = s.rss_peak(hi=first)
    if proc.rc != 0:
        run.notes.append(f"exit {proc.rc}")
    if run.window_s < 1.0:
        run.notes.append("steady window under 1 s: raise --duration")
    return run


def run_reference(
    url: str, body: Path, streams: int, duration: float, args: argparse.Namespace, tmp: Path
) -> Run:
    out = tmp / "reference.json"
    cmd = [sys.executable, str(REFERENCE), url, str(body), "--streams", str(streams)]
    cmd += ["--duration", str(duration), "--out", str(out)]
    proc = launch(cmd, args.client_cpu, None, timeout=duration + 120)
    if proc.rc != 0 or not out.exists():
        raise SystemExit(f"reference client failed ({proc.rc}):\n{proc.output.decode()[-3000:]}")
    recs = [(a, b, int(c), ok > 0) for a, b, c, ok in orjson.loads(out.read_bytes())]
    out.unlink()
    run = measure("reference", streams, proc, recs, args.warmup)
    run.prompt_tokens = args.prompt_tokens
    return run


def run_stress(
    scenario: Path,
    streams: int,
    duration: float,
    args: argparse.Namespace,
    tmp: Path,
    tui: bool,
) -> Run:
    out = tmp / "runs"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "stress", "run", str(scenario), "--out", str(out)]
    cmd += ["--users", str(streams), "--duration", f"{duration}s", "--fail-on", "never"]
    if not tui:
        cmd.append("--no-tui")
    size = tuple(int(x) for x in args.tui_size.lower().split("x"))
    tty = (size[0], size[1]) if tui else None
    proc = launch(cmd, args.client_cpu, tty, duration + 300, args.view_cpu)
    dirs = sorted(out.iterdir()) if out.exists() else []
    if not dirs or not (dirs[-1] / "requests.jsonl").exists():
        raise SystemExit(f"stress run failed ({proc.rc}):\n{proc.output.decode()[-3000:]}")
    run_dir = dirs[-1]
    t0 = float(orjson.loads((run_dir / "manifest.json").read_bytes())["start_time"])
    recs: list[Rec] = []
    prompt: list[int] = []
    for line in (run_dir / "requests.jsonl").read_bytes().splitlines():
        r = orjson.loads(line)
        if r.get("e2e_s") is None:
            continue
        start = t0 + float(r["t_start"])
        chunks = int(r["chunks_content"]) + int(r["chunks_reasoning"]) + int(r["chunks_empty"])
        recs.append((start, start + float(r["e2e_s"]), chunks, r["outcome"] == "ok"))
        prompt.append(int(r["prompt_tokens_est"]))
    if args.keep is not None:
        dest = args.keep / f"{len(list(args.keep.glob('*'))) + 1:03d}-{run_dir.name}"
        shutil.copytree(run_dir, dest)
    shutil.rmtree(out, ignore_errors=True)
    run = measure("stress+tui" if tui else "stress", streams, proc, recs, args.warmup)
    run.prompt_tokens = statistics.fmean(prompt) if prompt else 0.0
    return run


def write_scenario(
    tmp: Path, name: str, url: str, max_tokens: int, extra: str, ramp: str = "0s"
) -> Path:
    """The closed-loop scenario at ``tmp/<name>.yaml``; ``ramp``: the users' ramp-up
    (``ttft_accuracy.py`` spreads its streams over one reply)."""
    path = tmp / f"{name}.yaml"
    path.write_text(
        SCENARIO.format(
            name=name, url=url, model=MODEL, max_tokens=max_tokens, extra=extra, ramp=ramp
        )
    )
    return path


# --- reporting -----------------------------------------------------------------------


def ratio(num: list[Run], den: list[Run], key: str) -> list[float]:
    out = []
    for a, b in zip(num, den, strict=True):
        x, y = getattr(a, key), getattr(b, key)
        if y:
            out.append(x / y)
    return out


def summarise(title: str, groups: dict[str, list[Run]], base: str = "reference") -> None:
    print(f"\n  {title}: mean ± sd (min, max, n) over repeats; steady state")
    for who, runs in groups.items():
        if not runs:
            continue
        print(f"    {who:<10} req/s          {mean_spread([r.req_s for r in runs], 1)}")
        print(f"    {who:<10} chunks/cpu-s   {mean_spread([r.chunks_per_cpu_s for r in runs])}")
        print(f"    {who:<10} cpu us/chunk   {mean_spread([r.us_per_chunk for r in runs], 2)}")
        print(f"    {who:<10} cpu us/request {mean_spread([r.us_per_request for r in runs])}")
    ref = groups.get(base, [])
    for who, runs in groups.items():
        if who == base or not runs or not ref:
            continue
        print(
            f"    ratio {who}/{base}: req/s {mean_spread(ratio(runs, ref, 'req_s'), 3)}; "
            f"cpu per chunk {mean_spread(ratio(runs, ref, 'us_per_chunk'), 3)}"
        )
    sys.stdout.flush()


def tui_cost(tui: list[Run], head: list[Run], key: str, ref: list[Run] | None = None) -> None:
    """What the live view adds: to the run's process (which sends the snapshots) a ratio
    to headless and the CPU it adds as a share of a core (a cost per second, whatever the
    load: it draws at a fixed rate); and the view's own process, apart."""
    kib = [t.tty_bytes / t.whole_wall_s / 1024 for t in tui]
    extra = [t.cpu_pct - h.cpu_pct for t, h in zip(tui, head, strict=True)]
    what = "req/s" if key == "req_s" else "cpu per chunk"
    print(
        f"    TUI cost to the run's process: {what} {mean_spread(ratio(tui, head, key), 3)} x "
        f"headless, +{mean_spread(extra, 1)} % of a core; the view's own process "
        f"{mean_spread([t.view_pct for t in tui], 1)} % of a core; "
        f"{mean_spread(kib)} KiB/s to the terminal"
    )
    if ref and key == "us_per_chunk":
        both = [t.us_per_chunk_with_view / r.us_per_chunk for t, r in zip(tui, ref, strict=False)]
        print(
            "    the run's and the view's processes together: cpu per chunk "
            f"{mean_spread(both, 3)} x the reference"
        )


def view_cost(tui: list[Run], head: list[Run], key: str, view_cpu: int | None) -> str:
    """The live view's cost in one line, for the targets block."""
    what = "requests/s" if key == "req_s" else "CPU per chunk"
    where = f"cpu {view_cpu}" if view_cpu is not None else "the client's core"
    return (
        f"its cost: the run's process {statistics.fmean(ratio(tui, head, key)):.3f}x its "
        f"headless {what}; the view's own process "
        f"{statistics.fmean(t.view_pct for t in tui):.1f} % of a core, on {where}"
    )


def split(short: list[Run], long: list[Run]) -> tuple[list[float], list[float]]:
    """Per-request (a) and per-chunk (b) CPU in us from cpu/request = a + b x chunks/request
    at two reply lengths, one pair of runs per repeat."""
    a_s, b_s = [], []
    for s, lg in zip(short, long, strict=True):
        dn = lg.chunks_per_request - s.chunks_per_request
        if dn <= 0 or not s.requests or not lg.requests:
            continue
        b = (lg.us_per_request - s.us_per_request) / dn
        a_s.append(s.us_per_request - b * s.chunks_per_request)
        b_s.append(b)
    return a_s, b_s


# --- the parts -----------------------------------------------------------------------


def part_burst(
    args: argparse.Namespace, tmp: Path, rss: dict[int, list[Run]], targets: Targets
) -> None:
    long_reply, short_reply = sse_body(args.chunks), sse_body(max(2, args.short_chunks))
    bodies = {"b": long_reply, "s": short_reply}
    files = {"b/v1/models": MODELS, "s/v1/models": MODELS}
    body = tmp / "burst-body.json"
    body.write_bytes(request_body(args.prompt_tokens))
    print(
        f"\n# burst: nginx on cpu {args.server_cpu} serves a static {args.chunks}-chunk reply "
        f"({len(long_reply):,} B)"
        + (f" and a {args.short_chunks}-chunk one" if args.short_chunks else "")
        + f"; {args.duration:g} s per run, the first {args.warmup:g} s after the first request "
        "not counted",
        flush=True,
    )
    with nginx(bodies, cpu=args.server_cpu, files=files) as root:
        lengths = [("b", args.chunks)] + ([("s", args.short_chunks)] if args.short_chunks else [])
        scen = {
            name: write_scenario(tmp, f"burst_{name}", f"{root}/{name}", 4096, "{}")
            for name, _ in lengths
        }
        dur = args.duration
        for i, streams in enumerate(args.streams):
            runs: dict[tuple[str, str], list[Run]] = {}
            for r in range(args.repeat):
                for name, n in lengths:
                    order = ["reference", "stress"] if r % 2 == 0 else ["stress", "reference"]
                    if "tui" in args.parts and i == 0 and name == "b":
                        order.append("stress+tui")
                    for who in order:
                        if who == "reference":
                            run = run_reference(f"{root}/{name}", body, streams, dur, args, tmp)
                        else:
                            on = who == "stress+tui"
                            run = run_stress(scen[name], streams, dur, args, tmp, on)
                        runs.setdefault((name, who), []).append(run)
                        if who == "stress" and name == "b":
                            rss.setdefault(streams, []).append(run)
                        print(f"{run.line()} [{n}-chunk reply, repeat {r + 1}]", flush=True)
            groups = {w: v for (nm, w), v in runs.items() if nm == "b"}
            summarise(f"burst, {streams} streams, {args.chunks}-chunk replies", groups)
            targets.add("burst", ratio(groups["stress"], groups["reference"], "req_s"), streams)
            if args.short_chunks:
                short = {w: v for (nm, w), v in runs.items() if nm == "s"}
                summarise(f"burst, {streams} streams, {args.short_chunks}-chunk replies", short)
                for who in ("reference", "stress"):
                    a, b = split(runs[("s", who)], runs[("b", who)])
                    print(
                        f"    {who:<10} per request {mean_spread(a, 1)} us + per chunk "
                        f"{mean_spread(b, 2)} us (from the two reply lengths)"
                    )
            tuis = runs.get(("b", "stress+tui"), [])
            if tuis:
                head = runs[("b", "stress")]
                tui_cost(tuis, head, "req_s")
                targets.add(
                    "burst_tui",
                    ratio(tuis, runs[("b", "reference")], "req_s"),
                    streams,
                    view_cost(tuis, head, "req_s", args.view_cpu),
                )
            sys.stdout.flush()


def part_paced(args: argparse.Namespace, tmp: Path, targets: Targets) -> None:
    for clock in args.paced_clock:
        paced_clock(args, tmp, clock, targets)


class ServerLoad:
    """The paced server's wakes (voluntary context switches) and CPU from now on: its wakes
    follow where the streams' chunks fall, and the client's wakes follow its."""

    def __init__(self, proc: psutil.Process) -> None:
        self.proc = proc
        self.t = time.perf_counter()
        self.wakes = proc.num_ctx_switches().voluntary
        self.cpu = sum(proc.cpu_times()[:2])

    def since(self) -> str:
        dt = time.perf_counter() - self.t
        wakes = (self.proc.num_ctx_switches().voluntary - self.wakes) / dt
        cpu = (sum(self.proc.cpu_times()[:2]) - self.cpu) / dt * 100
        return (
            f"the paced server over the client's whole run: {wakes:,.0f} wakes/s, "
            f"{cpu:.1f}% of a core"
        )


PACED_CLOCKS = {
    "stream": "each stream paced from its own request's arrival",
    "step": "one decode step for every stream, as a batching server writes an engine step",
}


def paced_clock(args: argparse.Namespace, tmp: Path, clock: str, targets: Targets) -> None:
    streams, dur = args.paced_streams, args.paced_duration
    lengths = [int(PACED["chunks"])] + (
        [args.paced_short_chunks] if args.paced_short_chunks else []
    )
    print(
        f"\n# paced, {clock} clock ({PACED_CLOCKS[clock]}): paced_server.py on cpu "
        f"{args.server_cpu}, one chunk per read every {PACED['gap_ms']:g} ms, "
        f"{' and '.join(map(str, lengths))}-chunk replies, {streams} "
        f"streams; {dur:g} s per run, the first {args.warmup:g} s after the first request not "
        "counted",
        flush=True,
    )
    runs: dict[tuple[int, str], list[Run]] = {}
    with paced_server(args.server_cpu, clock=clock) as (url, _log):
        server = next(
            c for c in psutil.Process().children() if "paced_server.py" in " ".join(c.cmdline())
        )
        for r in range(args.repeat):
            for n in lengths:
                spec = {**PACED, "chunks": n}
                extra = orjson.dumps({"bench": spec}).decode()
                scen = write_scenario(tmp, f"paced{n}", url, n, extra)
                body = tmp / f"paced-body-{n}.json"
                body.write_bytes(request_body(args.prompt_tokens, {"bench": spec}))
                order = ["reference", "stress"] if r % 2 == 0 else ["stress", "reference"]
                if "tui" in args.parts and n == lengths[0]:
                    order.append("stress+tui")
                for who in order:
                    before = ServerLoad(server)
                    if who == "reference":
                        run = run_reference(url, body, streams, dur, args, tmp)
                    else:
                        run = run_stress(scen, streams, dur, args, tmp, who == "stress+tui")
                    runs.setdefault((n, who), []).append(run)
                    print(f"{run.line()} [paced {clock} {n}-chunk, repeat {r + 1}]", flush=True)
                    print(f"    {before.since()}", flush=True)
    for n in lengths:
        summarise(
            f"paced, {clock} clock, {streams} streams, {n}-chunk replies",
            {w: v for (m, w), v in runs.items() if m == n},
        )
    if len(lengths) > 1:
        for who in ("reference", "stress"):
            a, b = split(runs[(lengths[1], who)], runs[(lengths[0], who)])
            print(
                f"    {who:<10} per request {mean_spread(a, 1)} us + per chunk "
                f"{mean_spread(b, 2)} us (paced, {clock} clock, from the two reply lengths)"
            )
    tui, head = runs.get((lengths[0], "stress+tui"), []), runs.get((lengths[0], "stress"), [])
    ref = runs[(lengths[0], "reference")]
    targets.add(f"paced_{clock}", ratio(head, ref, "us_per_chunk"), streams)
    if tui and head:
        tui_cost(tui, head, "us_per_chunk", ref)
        cost = view_cost(tui, head, "us_per_chunk", args.view_cpu)
        targets.add(f"paced_{clock}_tui", ratio(tui, ref, "us_per_chunk"), streams, cost)
    sys.stdout.flush()


def part_rss(
    args: argparse.Namespace, tmp: Path, rss: dict[int, list[Run]], targets: Targets
) -> None:
    streams = args.rss_streams
    runs = rss.get(streams, [])
    if not runs:
        print(f"\n# rss: headless stress run, burst, {streams} streams", flush=True)
        with nginx({"b": sse_body(args.chunks)}, args.server_cpu, {"b/v1/models": MODELS}) as root:
            scen = write_scenario(tmp, "rss", f"{root}/b", 4096, "{}")
            for r in range(args.repeat):
                run = run_stress(scen, streams, args.duration, args, tmp, False)
                runs.append(run)
                print(f"{run.line()} [rss, repeat {r + 1}]", flush=True)
    print(f"\n  RSS of the headless stress process at {streams} streams (MiB):")
    print(f"    at the first request {mean_spread([r.rss_start_mib for r in runs], 1)}")
    print(f"    steady peak         {mean_spread([r.rss_steady_mib for r in runs], 1)}")
    print(f"    whole-command peak  {mean_spread([r.rss_peak_mib for r in runs], 1)}")
    targets.add("rss", [r.rss_steady_mib for r in runs], streams)
    sys.stdout.flush()


def _start_runs(
    args: argparse.Namespace, stress_cmd: list[str], pin: int | None, view: bool = False
) -> list[float]:
    """Launch to the first request at the server, seconds, one a repeat."""
    where = f"pinned to cpu {pin}" if pin is not None else "not pinned"
    if view:
        where += ", with the live view in a terminal"
    first, to_clock = [], []
    for r in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="stress-e2e-start-") as d:
            logs = Path(d)
            out = logs / "runs"
            with paced_server(args.server_cpu, log_dir=logs) as (url, log):
                cmd = [*stress_cmd, "run", str(QUICKSTART), "--target", url]
                cmd += [] if view else ["--no-tui"]
                cmd += ["--duration", "2s", "--out", str(out), "--fail-on", "never"]
                size = tuple(int(x) for x in args.tui_size.lower().split("x"))
                proc = launch(cmd, pin, (size[0], size[1]) if view else None, timeout=120)
            arrivals = [orjson.loads(x)["t_recv"] for x in log.read_bytes().splitlines()]
            if not arrivals:
                raise SystemExit(f"no request reached the server:\n{proc.output.decode()[-3000:]}")
            (run_dir,) = list(out.iterdir())
            t0 = float(orjson.loads((run_dir / "manifest.json").read_bytes())["start_time"])
            first.append(min(arrivals) - proc.t_launch_perf)
            to_clock.append(t0 - proc.t_launch)
            print(
                f"  {where}, repeat {r + 1}: first request at the server {first[-1]:.3f} s after "
                f"launch (run clock started at {to_clock[-1]:.3f} s: imports, scenario, corpus, "
                f"probe); whole command {proc.wall_s:.1f} s, exit {proc.rc}",
                flush=True,
            )
    print(f"    launch to first request  {mean_spread(first, 3)} s ({where})")
    print(f"    launch to run clock      {mean_spread(to_clock, 3)} s ({where})")
    return first


def part_start(args: argparse.Namespace, tmp: Path, targets: Targets) -> None:
    stress_exe = Path(sys.executable).with_name("stress")
    stress_cmd = [str(stress_exe)] if stress_exe.exists() else [sys.executable, "-m", "stress"]
    print(
        f"\n# start: `{' '.join(stress_cmd)} run {QUICKSTART.relative_to(ROOT)} --target URL "
        "--no-tui` against paced_server.py; launch to the first chat request at the server",
        flush=True,
    )
    # pinned to the client's core, as every other part; then as a user runs it, on every
    # core (the GPU pre-flight's child and the corpus's encoding threads use others)
    first: list[float] = []
    ways = ["pinned" if args.client_cpu is not None else "", "unpinned"]
    for pin in dict.fromkeys([args.client_cpu, None]):
        first += _start_runs(args, stress_cmd, pin)
    if "tui" in args.parts:  # the quick start as the README shows it: in a terminal
        ways.append("each with the view in a terminal")
        for pin in dict.fromkeys([args.client_cpu, None]):
            first += _start_runs(args, stress_cmd, pin, view=True)
    targets.add("first_request", first, note="runs: " + ", ".join(w for w in ways if w))
    for what, cmd in (
        ("stress --help", [*stress_cmd, "--help"]),
        ("stress run --help", [*stress_cmd, "run", "--help"]),
        ("python -c pass", [sys.executable, "-c", "pass"]),
    ):
        times = []
        if args.client_cpu is not None:
            cmd = ["taskset", "-c", str(args.client_cpu), *cmd]
        for _ in range(max(3, args.repeat)):
            t = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
            times.append(time.perf_counter() - t)
        print(f"    {what:<24} {mean_spread(times, 3)} s wall")
        if what == "stress --help":
            targets.add("help", times)
    sys.stdout.flush()


# --- main ----------------------------------------------------------------------------


def revision() -> str:
    """The commit measured, and whether the working tree differs from it. A copy whose git
    metadata is older than its files (the device machine gets the session's first commit's)
    is named by ``E2E_REVISION``, printed beside what git says there."""
    given = os.environ.get("E2E_REVISION")
    if given:
        return f"{given} (E2E_REVISION; git here: {_git_revision()})"
    return _git_revision()


def _git_revision() -> str:
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown revision"
    return out.stdout.strip()


@contextlib.contextmanager
def off_core(cpu: int | None) -> Iterator[None]:
    """Keep this script (and the sampler threads) off the client's core."""
    old = os.sched_getaffinity(0)
    if cpu is not None and len(old) > 1:
        os.sched_setaffinity(0, old - {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, old)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--parts",
        nargs="+",
        default=["burst", "paced", "tui", "rss", "start"],
        choices=["burst", "paced", "tui", "rss", "start"],
    )
    ap.add_argument("--streams", type=int, nargs="+", default=[64], help="burst levels")
    ap.add_argument("--paced-streams", type=int, default=64)
    ap.add_argument(
        "--paced-duration", type=float, default=12.0, help="seconds each paced client runs"
    )
    ap.add_argument(
        "--paced-clock",
        nargs="+",
        choices=["stream", "step"],
        default=["stream", "step"],
        help="paced_server.py's clocks, each measured apart: stream (each stream paced from "
        "its own arrival) and step (one decode step for every stream, as a batching server)",
    )
    ap.add_argument(
        "--paced-short-chunks",
        type=int,
        default=25,
        help="a second, short paced reply for the per-request/per-chunk split (0: off)",
    )
    ap.add_argument("--rss-streams", type=int, default=256)
    ap.add_argument("--chunks", type=int, default=256, help="content chunks per burst reply")
    ap.add_argument(
        "--short-chunks",
        type=int,
        default=16,
        help="a second, short burst reply for the per-request/per-chunk split (0: off)",
    )
    ap.add_argument(
        "--prompt-tokens",
        type=int,
        default=250,
        help="words in the reference's prompt (stress's own average about 250 tokens)",
    )
    ap.add_argument("--duration", type=float, default=8.0, help="seconds each client runs")
    ap.add_argument(
        "--warmup", type=float, default=2.0, help="seconds after the first request not counted"
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--client-cpu", type=int, default=0, help="-1: no pinning")
    ap.add_argument("--server-cpu", type=int, default=1, help="-1: no pinning")
    ap.add_argument(
        "--view-cpu",
        type=int,
        default=-2,
        help="where the live view's process goes: -2 (default) a core neither the client's "
        "nor the servers' if there is one (as the OS would place it), else it shares the "
        "client's; -1 the client's pinning, inherited",
    )
    ap.add_argument("--tui-size", default="160x50", help="COLUMNSxROWS of the pseudo-terminal")
    ap.add_argument("--keep", type=Path, help="copy every stress run directory here")
    args = ap.parse_args()
    ncpu = os.cpu_count() or 1
    if ncpu < 2:
        args.client_cpu = args.server_cpu = -1
    args.client_cpu = None if args.client_cpu < 0 else args.client_cpu
    args.server_cpu = None if args.server_cpu < 0 else args.server_cpu
    if args.view_cpu == -2:
        free = sorted(os.sched_getaffinity(0) - {args.client_cpu, args.server_cpu})
        args.view_cpu = free[0] if free and args.client_cpu is not None else None
    elif args.view_cpu < 0:
        args.view_cpu = None
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    print(
        f"# e2e: {machine()}; client cpu {args.client_cpu}, servers on cpu {args.server_cpu}, "
        f"the live view's process "
        + (f"on cpu {args.view_cpu}; " if args.view_cpu is not None else "with the client; ")
        + f"Python {sys.version.split()[0]}; stress at {revision()}; "
        f"{time.strftime('%Y-%m-%d %H:%M')}\n"
        "# Wall rates (req/s) depend on what else the machine runs; CPU per chunk or request"
        " is the steadier figure. A busy or shared machine: read the spread.",
        flush=True,
    )
    rss: dict[int, list[Run]] = {}
    targets = Targets()
    with off_core(args.client_cpu), tempfile.TemporaryDirectory(prefix="stress-e2e-") as d:
        tmp = Path(d)
        if "burst" in args.parts:
            part_burst(args, tmp, rss, targets)
        if "paced" in args.parts:
            part_paced(args, tmp, targets)
        if "rss" in args.parts:
            part_rss(args, tmp, rss, targets)
        if "start" in args.parts:
            part_start(args, tmp, targets)
    print(f"\n{targets.report(args.parts)}", flush=True)
    print(f"\n# done; {machine()}", flush=True)


if __name__ == "__main__":
    main()
