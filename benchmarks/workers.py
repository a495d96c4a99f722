"""How ``stress run --workers N`` scales: chunks per second with 1, 2, 4, 8 worker processes.

Why (issue 16): one ``stress`` process is one event loop on one core; ``--workers N``
shares the users over N worker processes while the parent keeps the run directory, the
live view and the collectors (docs/scaling.md). The question here is how far that scales
on a many-core machine, and whether the parent (which applies every worker's records)
becomes the bottleneck. Done when 2,000 users with ``--workers 8`` run at >= 6x the
single-process throughput, with the same records and report as one process gives.

For each ``--workers`` level, ``--repeat`` times (the level order reversed on every other
repeat, so drift of the machine does not favour one end), this runs the real CLI

    python -m stress run SCENARIO --no-tui --workers N --users U --duration T --fail-on never

pinned (``taskset``) to ``--client-cpus``, against nginx serving a static vLLM-shaped reply
of ``--chunks`` chunks (``benchmarks/_common.py``), with ``--nginx-workers`` worker processes
pinned to ``--server-cpus``, so the target is not the limit (its CPU is printed). The
scenario is ``e2e.py``'s: a closed loop, zero think time, a 150-250-token corpus paste and a
question every turn, telemetry off (no server metrics, no GPUs). This script keeps off both
sets of cores (``--bench-cpus``, by default whatever is left).

Figures per run, all from the run's own files and from outside:

- **requests/s and chunks/s, steady state**: read from ``requests.jsonl`` (the run clock
  mapped to wall time by ``manifest.json``'s ``start_time``), over the window from the
  first request's send plus ``--warmup`` to the last request's send, each request counted
  for the share of its life inside it, its chunks likewise (as ``e2e.py`` does);
- **CPU** (user + system) of the parent and of each worker, sampled with psutil every
  ``--interval`` s over the process tree and interpolated to the window's ends: the
  parent in % of a core (near 100 %: the parent is the limit), its share of all stress CPU,
  the workers' mean and max, nginx's CPU, and how busy the client and server cores were
  (everything on them, from ``/proc/stat``);
- **records complete**: ``state.json`` finished with sent == recorded and nothing in
  flight; one line per request in ``requests.jsonl``, request ids unique and naming their
  user and round, every user present with rounds 1..n without a gap, every outcome ok;
  ``manifest.json`` says ``workers: N`` with N pids; no ``worker_died`` event;
  ``summary.json`` counts the same requests; and the record fields, ``summary.json``'s keys
  and ``report.md``'s headings are those of the ``--workers 1`` run.

Then, per level: mean ± sd over repeats, and the ratio to ``--workers 1`` (taken per
repeat, then averaged).

    .venv/bin/python benchmarks/workers.py                                  # 16 cores
    .venv/bin/python benchmarks/workers.py --workers 1 2 --users 64 --duration 6 --repeat 1
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _common
from benchmarks._common import machine, mean_spread, nginx, sse_body
from benchmarks.e2e import _at, revision, write_scenario
from benchmarks.paced_server import MODELS

# --- cpus ------------------------------------------------------------------------------


def cpu_list(text: str) -> list[int]:
    """``0-10,12`` -> [0, 1, ..., 10, 12]."""
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            out += range(int(a), int(b) + 1)
        elif part.strip():
            out.append(int(part))
    return sorted(set(out))


def cpu_text(cpus: list[int]) -> str:
    return ",".join(map(str, cpus))


def default_cpus(args: argparse.Namespace) -> None:
    """16 cores: clients 0-10, this script 11, nginx 12-15; small machines: what fits."""
    have = sorted(os.sched_getaffinity(0))
    n = len(have)
    server = cpu_list(args.server_cpus) if args.server_cpus else have[-max(1, n // 4) :]
    rest = [c for c in have if c not in server]
    if args.bench_cpus:
        bench = cpu_list(args.bench_cpus)
    elif len(rest) >= 4:
        bench = rest[-1:]
    else:
        bench = server  # no core to spare: share nginx's
    if args.client_cpus:
        client = cpu_list(args.client_cpus)
    else:
        client = [c for c in rest if c not in bench] or rest or have
    args.server, args.client, args.bench = server, client, bench


@contextlib.contextmanager
def nginx_workers(n: int) -> Iterator[None]:
    """``_common.nginx`` with ``n`` worker processes (its config has one)."""
    conf = _common.NGINX_CONF
    _common.NGINX_CONF = conf.replace("worker_processes 1;", f"worker_processes {n};")
    try:
        yield
    finally:
        _common.NGINX_CONF = conf


# --- sampling the process tree -----------------------------------------------------------


class TreeSampler:
    """CPU seconds (user + system) of the stress parent and of each of its workers, of
    nginx (all its processes), and busy seconds of the client and server cores, every
    ``interval`` s, stamped with wall time, in a thread of this process."""

    def __init__(
        self, pid: int, nginx_pids: list[int], client: list[int], server: list[int], dt: float
    ) -> None:
        self.parent = psutil.Process(pid)
        self.nginx = [psutil.Process(p) for p in nginx_pids]
        self.client, self.server, self.dt = client, server, dt
        self.series: dict[int, list[tuple[float, float]]] = {pid: []}
        self.workers: set[int] = set()
        self.others: set[int] = set()
        self.nginx_s: list[tuple[float, float]] = []
        self.client_s: list[tuple[float, float]] = []
        self.server_s: list[tuple[float, float]] = []
        self._procs: dict[int, psutil.Process] = {pid: self.parent}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _scan(self) -> None:
        with contextlib.suppress(psutil.Error):
            for c in self.parent.children(recursive=True):
                if c.pid in self._procs:
                    continue
                with contextlib.suppress(psutil.Error):
                    cmd = " ".join(c.cmdline())
                    (self.workers if "stress.runtime.worker" in cmd else self.others).add(c.pid)
                    self._procs[c.pid] = c
                    self.series[c.pid] = []

    @staticmethod
    def _busy(cpus: list[int], per: list[Any]) -> float:
        total = 0.0
        for i in cpus:
            c = per[i]
            total += c.user + c.nice + c.system + getattr(c, "irq", 0.0)
            total += getattr(c, "softirq", 0.0) + getattr(c, "steal", 0.0)
        return total

    def _run(self) -> None:
        next_scan = 0.0
        while not self._stop.is_set():
            now = time.time()
            if now >= next_scan:  # a /proc scan: twice a second, not every sample
                self._scan()
                next_scan = now + 0.5
            for pid, p in self._procs.items():
                with contextlib.suppress(psutil.Error):
                    t = p.cpu_times()
                    self.series[pid].append((now, t.user + t.system))
            ng = 0.0
            for p in self.nginx:
                with contextlib.suppress(psutil.Error):
                    t = p.cpu_times()
                    ng += t.user + t.system
            self.nginx_s.append((now, ng))
            per = psutil.cpu_times(percpu=True)
            self.client_s.append((now, self._busy(self.client, per)))
            self.server_s.append((now, self._busy(self.server, per)))
            self._stop.wait(self.dt)

    def cpu(self, pid: int, lo: float, hi: float) -> float:
        s = self.series.get(pid, [])
        return _at(s, hi) - _at(s, lo)


def nginx_pids() -> list[int]:
    """nginx's master and workers: this script's descendants of that name."""
    return [
        p.pid for p in psutil.Process().children(recursive=True) if p.name().startswith("nginx")
    ]


# --- one run -----------------------------------------------------------------------------


@dataclass(slots=True)
class Run:
    workers: int
    repeat: int
    rc: int = 0
    window_s: float = 0.0
    requests: float = 0.0
    chunks: float = 0.0
    records: int = 0
    errors: int = 0
    parent_cpu: float = 0.0
    """Seconds in the window."""
    worker_cpu: list[float] = field(default_factory=list)
    other_cpu: float = 0.0
    nginx_cpu: float = 0.0
    client_busy: float = 0.0
    server_busy: float = 0.0
    whole_s: float = 0.0
    start_s: float = 0.0
    """Launch to the first request's send (imports, workers set up, probe)."""
    end_s: float = 0.0
    """The last request's end to the exit (drain, summary, analysis, report)."""
    complete: bool = False
    problems: list[str] = field(default_factory=list)
    verdict: str = ""
    shape: dict[str, Any] = field(default_factory=dict)
    """What must equal the ``--workers 1`` run's: record fields, summary keys, headings."""
    events: Counter[str] = field(default_factory=Counter)
    bad_events: list[str] = field(default_factory=list)

    @property
    def req_s(self) -> float:
        return self.requests / self.window_s if self.window_s else 0.0

    @property
    def chunks_s(self) -> float:
        return self.chunks / self.window_s if self.window_s else 0.0

    def pct(self, cpu_s: float) -> float:
        return 100 * cpu_s / self.window_s if self.window_s else 0.0

    @property
    def stress_cpu(self) -> float:
        return self.parent_cpu + sum(self.worker_cpu) + self.other_cpu

    @property
    def parent_share(self) -> float:
        return 100 * self.parent_cpu / self.stress_cpu if self.stress_cpu else 0.0

    def line(self, args: argparse.Namespace) -> str:
        w = [self.pct(c) for c in self.worker_cpu]
        workers = (
            f"workers {len(w)} x {statistics.fmean(w):.0f}% (min {min(w):.0f}, max {max(w):.0f})"
            if w
            else "no workers (one process)"
        )
        ok = "yes" if self.complete else "NO: " + "; ".join(self.problems)
        nginx = f"nginx {self.pct(self.nginx_cpu):.0f}% of {len(args.server)} cores"
        busy = (
            f"cores busy: clients {self.client_busy / len(args.client):.0f}%, "
            f"server {self.server_busy / len(args.server):.0f}%"
        )
        return (
            f"  --workers {self.workers} [repeat {self.repeat}]: {self.req_s:8,.1f} req/s "
            f"{self.chunks_s:11,.0f} chunks/s in {self.window_s:.1f} s | cpu: parent "
            f"{self.pct(self.parent_cpu):5.1f}% of a core ({self.parent_share:5.1f}% of stress's "
            f"{self.pct(self.stress_cpu):6.1f}%), {workers} | {nginx} | {busy}"
            f" | {self.records:,} records, {self.errors} errors, complete: {ok} | verdict "
            f"{self.verdict} | whole {self.whole_s:.1f} s (start {self.start_s:.1f} s, end "
            f"{self.end_s:.1f} s), exit {self.rc}"
        )


def run_stress(args: argparse.Namespace, scenario: Path, n: int, repeat: int, tmp: Path) -> Run:
    out = tmp / "runs"
    shutil.rmtree(out, ignore_errors=True)
    cmd = ["taskset", "-c", cpu_text(args.client), sys.executable, "-m", "stress", "run"]
    cmd += [str(scenario), "--no-tui", "--workers", str(n), "--users", str(args.users)]
    cmd += ["--duration", f"{args.duration:g}s", "--out", str(out), "--fail-on", "never"]
    if args.ray:  # the workers are Ray actors: the raylet's children, not sampled here
        cmd += ["--ray", args.ray]
    log = tmp / "stdout.txt"
    run = Run(n, repeat)
    with log.open("wb") as fh:
        t_launch = time.time()
        popen = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT)
        sampler = TreeSampler(popen.pid, args.nginx_pids, args.client, args.server, args.interval)
        with sampler:
            try:
                run.rc = popen.wait(args.duration + args.timeout)
            except subprocess.TimeoutExpired:
                popen.kill()
                run.rc = popen.wait()
                run.problems.append(f"killed after {args.duration + args.timeout:g} s")
        run.whole_s = time.time() - t_launch
    dirs = sorted(out.iterdir()) if out.exists() else []
    if not dirs or not (dirs[-1] / "requests.jsonl").exists():
        raise SystemExit(
            f"stress run failed ({run.rc}):\n{log.read_text(errors='replace')[-4000:]}"
        )
    run_dir = dirs[-1]
    t0 = float(orjson.loads((run_dir / "manifest.json").read_bytes())["start_time"])
    lines = (run_dir / "requests.jsonl").read_bytes().splitlines()
    recs = [orjson.loads(x) for x in lines]
    spans = []
    for r in recs:
        if r.get("e2e_s") is None or r.get("t_start") is None:
            continue
        start = t0 + float(r["t_start"])
        chunks = int(r["chunks_content"]) + int(r["chunks_reasoning"]) + int(r["chunks_empty"])
        spans.append((start, start + float(r["e2e_s"]), chunks))
    if spans:
        first = min(s[0] for s in spans)
        lo, hi = first + args.warmup, max(s[0] for s in spans)
        run.window_s = max(0.0, hi - lo)
        for start, end, chunks in spans:
            share = max(0.0, min(end, hi) - max(start, lo)) / max(end - start, 1e-9)
            run.requests += share
            run.chunks += share * chunks
        run.parent_cpu = sampler.cpu(popen.pid, lo, hi)
        run.worker_cpu = [sampler.cpu(p, lo, hi) for p in sorted(sampler.workers)]
        run.other_cpu = sum(sampler.cpu(p, lo, hi) for p in sampler.others)
        run.nginx_cpu = _at(sampler.nginx_s, hi) - _at(sampler.nginx_s, lo)
        if run.window_s:
            run.client_busy = run.pct(_at(sampler.client_s, hi) - _at(sampler.client_s, lo))
            run.server_busy = run.pct(_at(sampler.server_s, hi) - _at(sampler.server_s, lo))
        run.start_s = first - t_launch
        run.end_s = t_launch + run.whole_s - max(s[1] for s in spans)
        if run.window_s < 1.0:
            run.problems.append("steady window under 1 s: raise --duration")
    check(run, run_dir, recs, args.users)
    if args.keep is not None:
        shutil.copytree(run_dir, args.keep / f"w{n}-r{repeat}-{run_dir.name}")
    shutil.rmtree(out, ignore_errors=True)
    if run.rc != 0:
        run.problems.append(f"exit {run.rc}: {log.read_text(errors='replace')[-600:]!r}")
        run.complete = False
    return run


def check(run: Run, run_dir: Path, recs: list[dict[str, Any]], users: int) -> None:
    """Every request has exactly one record, each ok; the run's files agree."""
    p = run.problems
    state = orjson.loads((run_dir / "state.json").read_bytes())
    manifest = orjson.loads((run_dir / "manifest.json").read_bytes())
    summary = orjson.loads((run_dir / "summary.json").read_bytes())
    run.records = len(recs)
    if not state.get("finished"):
        p.append("state.json: not finished")
    if state.get("sent") != state.get("recorded") or state.get("recorded") != len(recs):
        p.append(f"sent {state.get('sent')}, recorded {state.get('recorded')}, lines {len(recs)}")
    if state.get("in_flight_count"):
        p.append(f"{state['in_flight_count']} in flight at the end")
    ids = Counter(r.get("request_id") for r in recs)
    dup = sum(c - 1 for c in ids.values() if c > 1)
    if dup:
        p.append(f"{dup} request ids recorded twice")
    wrong = sum(
        1 for r in recs if not str(r["request_id"]).endswith(f"-u{r['user']}-r{r['round']}")
    )
    if wrong:
        p.append(f"{wrong} request ids not naming their user and round")
    rounds: dict[int, list[int]] = {}
    for r in recs:
        rounds.setdefault(int(r["user"]), []).append(int(r["round"]))
    missing = users - len(set(rounds) & set(range(users)))
    if missing or set(rounds) - set(range(users)):
        p.append(f"{missing} users without a record, users seen {len(rounds)}")
    gaps = sum(1 for rs in rounds.values() if sorted(rs) != list(range(1, len(rs) + 1)))
    if gaps:
        p.append(f"{gaps} users whose rounds are not 1..n")
    outcomes = Counter(r["outcome"] for r in recs)
    run.errors = len(recs) - outcomes.get("ok", 0)
    if run.errors:
        p.append(f"outcomes {dict(outcomes)}")
    if int(manifest.get("workers", 1)) != run.workers:
        p.append(f"manifest says workers {manifest.get('workers')}")
    if run.workers > 1 and len(manifest.get("worker_pids") or []) != run.workers:
        p.append(f"manifest worker_pids {manifest.get('worker_pids')}")
    if summary.get("requests_total") != len(recs):
        p.append(f"summary requests_total {summary.get('requests_total')}")
    verdict = summary.get("verdict") or {}
    run.verdict = str(verdict.get("status", "?"))
    if verdict.get("reasons"):
        run.verdict += f" ({', '.join(map(str, verdict['reasons']))})"
    for line in (run_dir / "events.jsonl").read_bytes().splitlines():
        ev = orjson.loads(line)
        kind = str(ev.get("kind"))
        run.events[kind] += 1
        if kind in ("worker_died", "crash", "error", "user_crashed") or "died" in kind:
            run.bad_events.append(line.decode(errors="replace")[:400])
    if run.events.get("worker_died"):
        p.append(f"{run.events['worker_died']} worker_died events")
    report = run_dir / "report.md"
    run_id = str(manifest.get("run_id"))
    headings = [x.replace(run_id, "RUN") for x in report.read_text().splitlines() if x[:1] == "#"]
    run.shape = {
        "record fields": sorted({k for r in recs for k in r}),
        "summary.json keys": summary_keys(summary),
        "report.md headings": headings if report.exists() else ["(no report.md)"],
        "report.html": (run_dir / "report.html").exists(),
    }
    run.complete = not p


def summary_keys(summary: dict[str, Any]) -> list[str]:
    """Its keys two levels deep, but not the names under ``events`` (counts by kind:
    ``users_started`` once per worker) and ``per_user`` (user ids)."""
    out = []
    for k, v in summary.items():
        out.append(k)
        if isinstance(v, dict) and k not in ("events", "per_user"):
            out += [f"{k}.{kk}" for kk in v]
    return sorted(out)


# --- main --------------------------------------------------------------------------------


def summarise(args: argparse.Namespace, runs: dict[int, list[Run]]) -> None:
    base = {r.repeat: r for r in runs.get(1, [])}
    print("\n# per level: mean ± sd (min, max, n) over repeats; steady state")
    table = []
    for n in args.workers:
        rs = runs.get(n, [])
        if not rs:
            continue
        ratio = [r.chunks_s / base[r.repeat].chunks_s for r in rs if r.repeat in base]
        ratio = [x for x in ratio if x == x]
        print(f"\n  --workers {n}, {args.users} users:")
        print(f"    requests/s          {mean_spread([r.req_s for r in rs], 1)}")
        print(f"    chunks/s            {mean_spread([r.chunks_s for r in rs])}")
        if n != 1 and ratio:
            print(f"    ratio to 1 worker   {mean_spread(ratio, 2)} (chunks/s, per repeat)")
        print(f"    parent % of a core  {mean_spread([r.pct(r.parent_cpu) for r in rs], 1)}")
        print(f"    parent share of CPU {mean_spread([r.parent_share for r in rs], 1)} %")
        if n != 1:
            wm = [statistics.fmean(r.pct(c) for c in r.worker_cpu) for r in rs if r.worker_cpu]
            print(f"    worker % of a core  {mean_spread(wm, 1)} (mean over workers)")
        print(f"    stress % of cores   {mean_spread([r.pct(r.stress_cpu) for r in rs], 1)}")
        print(f"    nginx % of cores    {mean_spread([r.pct(r.nginx_cpu) for r in rs], 1)}")
        n_err, n_rec = sum(r.errors for r in rs), sum(r.records for r in rs)
        print(f"    errors              {n_err} in {n_rec:,} records")
        complete = all(r.complete for r in rs)
        print(f"    records complete    {'yes, every run' if complete else 'NO'}")
        events = sum((r.events for r in rs), Counter())
        print(f"    events              {dict(sorted(events.items()))}")
        for r in rs:
            for line in r.bad_events[:10]:
                print(f"    event (repeat {r.repeat}): {line}")
        table.append((n, rs, ratio, complete))
    one = runs.get(1, [])
    if one:
        ref = one[0].shape
        for n, rs, _, _ in table:
            for r in rs:
                diff = [k for k in ref if r.shape.get(k) != ref[k]]
                if diff:
                    print(f"  --workers {n} repeat {r.repeat}: differs from --workers 1 in {diff}")
        same = all(r.shape == ref for _, rs, _, _ in table for r in rs)
        print(
            "\n  same record fields, summary.json keys and report.md headings as --workers 1: "
            + ("yes, every run" if same else "NO (above)")
        )
    print(
        "\n  | workers | requests/s | chunks/s | ratio to 1 | parent % of a core | parent share "
        "| errors | complete |"
    )
    print("  |---:|---:|---:|---|---:|---:|---:|---|")
    for n, rs, ratio, complete in table:
        m = statistics.fmean
        rt = "1" if n == 1 else (mean_spread(ratio, 2).split(" (")[0] if ratio else "n/a")
        print(
            f"  | {n} | {m(r.req_s for r in rs):,.0f} | {m(r.chunks_s for r in rs):,.0f} | {rt} | "
            f"{m(r.pct(r.parent_cpu) for r in rs):.0f} % | {m(r.parent_share for r in rs):.1f} % | "
            f"{sum(r.errors for r in rs)} | {'yes' if complete else 'NO'} |"
        )
    top = max((n for n, *_ in table if n != 1), default=None)
    if top is not None and one:
        ratio = next(rt for n, _, rt, _ in table if n == top)
        if ratio:
            x = statistics.fmean(ratio)
            print(
                f"\n  --workers {top}: {x:.2f}x the one-process throughput "
                f"(target >= {args.target:g}x: {'met' if x >= args.target else 'NOT met'})"
            )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--users", type=int, default=2000)
    ap.add_argument("--duration", type=float, default=20.0, help="seconds each run lasts")
    ap.add_argument(
        "--warmup", type=float, default=4.0, help="seconds after the first send not counted"
    )
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--chunks", type=int, default=256, help="content chunks per reply")
    ap.add_argument("--client-cpus", help="cpus for stress (default: all but server and bench)")
    ap.add_argument("--server-cpus", help="cpus for nginx (default: the last quarter)")
    ap.add_argument("--bench-cpus", help="cpus for this script (default: one left over)")
    ap.add_argument("--nginx-workers", type=int, help="default: one per server cpu")
    ap.add_argument("--interval", type=float, default=0.1, help="CPU sampling interval, s")
    ap.add_argument("--timeout", type=float, default=600, help="seconds a run may overrun")
    ap.add_argument("--target", type=float, default=6.0, help="the ratio the top level must reach")
    ap.add_argument("--keep", type=Path, help="copy every run directory here")
    ap.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run the workers as actors of this Ray cluster (`ray start --head` it pinned with "
        "taskset to the client cpus); their CPU is then not in the figures, only the parent's",
    )
    args = ap.parse_args()
    default_cpus(args)
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    ngx = args.nginx_workers or len(args.server)
    if 1 not in args.workers:
        print("# note: no --workers 1 level, so no ratios", flush=True)
    print(
        f"# workers: {machine()}; nproc {len(os.sched_getaffinity(0))}; stress on cpus "
        f"{cpu_text(args.client)}, nginx ({ngx} workers) on {cpu_text(args.server)}, this script "
        f"on {cpu_text(args.bench)}; Python {sys.version.split()[0]}; stress at {revision()}; "
        f"{time.strftime('%Y-%m-%d %H:%M')}\n"
        f"# {args.users} users, closed loop, zero think time, {args.chunks}-chunk replies; "
        f"{args.duration:g} s per run, the first {args.warmup:g} s after the first send not "
        f"counted; --workers {' '.join(map(str, args.workers))}, {args.repeat} repeats",
        flush=True,
    )
    affinity = os.sched_getaffinity(0)
    os.sched_setaffinity(0, set(args.bench))
    runs: dict[int, list[Run]] = {}
    body = sse_body(args.chunks)
    with tempfile.TemporaryDirectory(prefix="stress-workers-") as d, nginx_workers(ngx):
        tmp = Path(d)
        with nginx({"b": body}, cpu=cpu_text(args.server), files={"b/v1/models": MODELS}) as root:  # type: ignore[arg-type]
            args.nginx_pids = nginx_pids()
            print(f"# nginx: {len(args.nginx_pids)} processes, reply {len(body):,} B", flush=True)
            scen = write_scenario(tmp, "workers", f"{root}/b", 4096, "{}")
            for r in range(1, args.repeat + 1):
                order = args.workers if r % 2 else list(reversed(args.workers))
                for n in order:
                    run = run_stress(args, scen, n, r, tmp)
                    runs.setdefault(n, []).append(run)
                    print(run.line(args), flush=True)
    os.sched_setaffinity(0, affinity)
    summarise(args, runs)
    print(f"\n# done; {machine()}", flush=True)


if __name__ == "__main__":
    main()
