"""TTFT measurement error under load: ``stress run`` and the reference loop against the
server's own send stamps, side by side, quiet and with a CPU hog on the client's core.

Why: a client whose event loop lags adds the lag to every TTFT it reports, and the lag
shows in the tail first (issue 40). The paced server (``paced_server.py``, on
``--server-cpu``) logs, on CLOCK_MONOTONIC (``time.perf_counter``, one clock for every
process of the machine), the instant each reply's first chunk went to the kernel; each
client records the instant it saw that chunk. The difference is the client's measurement
error: loopback transit, the client's wake-up and parsing, and any event-loop lag.

The clients (``--clients``), each in its own process pinned to ``--client-cpu`` (default:
the first core this script is pinned to, the server's excepted; the script itself then
moves off it), taken in turn at every level and repeat (the order alternating), against a
fresh server each:

- ``stress``: the real CLI, ``python -m stress run SCENARIO --no-tui --users N
  --duration T``, the scenario a closed loop (zero think time, a paste and a question
  every turn, a new conversation every turn as in ``e2e.py``), telemetry off. Its
  first-token instant is ``t_start + ttft_s`` of ``requests.jsonl`` on the run clock,
  mapped to the monotonic clock by ``manifest.json``'s ``start_time`` (wall time at the
  run clock's origin) and this script's own reading of wall minus monotonic time;
- ``reference``: ``reference_client.py``'s loop (aiohttp, ``async for line in
  resp.content``, ``orjson.loads`` of every ``data:`` line), copied here with two
  additions only: the first-token instant (``perf_counter`` when the first chunk with
  content has been parsed, as one would write it) and an ``X-Request-ID`` per request;
- ``chatclient`` (not by default): stress's ``ChatClient`` alone in a bare loop, as this
  benchmark measured before: stress's client without the rest of ``stress run``, so a gap
  between it and ``stress`` is the run's own work on the loop, not the client's.

Requests are matched to the server's log by their ``X-Request-ID`` (stress sends one on
every request; the reference and the bare loop send their own): the server is
``paced_server.py`` itself, started through this script only so that it logs that header
as the request's id. The send-to-arrival time (the server's arrival stamp minus the
client's send stamp) is printed as a check of the clock mapping: small and positive.

Each request asks for its first chunk ``--first-ms`` after arrival, then ``--chunks``
chunks ``--gap-ms`` apart (``--clock stream``: each stream paced from its own arrival).
The streams start ``--ramp`` apart in all (default: one request's length, so their chunks
spread evenly over time; 0: all at once, every first chunk of a wave in one burst), stress
by its ``ramp_up``, the others alike. Levels: ``--streams`` (16 and 128), each ``quiet``
and with ``hog`` (``--loads``): a busy-loop process (``while True: pass``) pinned to the
client's core, started before the client and killed after it. Reported apart:

- steady state: every request but each stream's first, sent ``--warmup`` s or more after
  the run's first request;
- first wave: each stream's first request (a new connection);
- the server's own scheduling lag (written minus intended instant): not client error, but
  it shows how quiet the server's core was.

Per level, error p50 and p99 (signed: a few are negative, the server stamping just after
the write the client had already read) as mean ± sd over ``--repeat`` repeats, per
client, and the ratio stress/reference taken per repeat (the two runs next to each other).

    .venv/bin/python benchmarks/ttft_accuracy.py       # 16 and 128, quiet and hog: ~3 min
    .venv/bin/python benchmarks/ttft_accuracy.py --repeat 1 --duration 5 --clients stress \
        reference chatclient
    .venv/bin/python benchmarks/ttft_accuracy.py --streams 128 --loads hog --ramp 0
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import POLICY, machine, paced_server, request_body
from benchmarks.e2e import write_scenario

HERE = Path(__file__).resolve()

Rec = tuple[str, int, int, float, float | None, bool]
"""One request as a client saw it: id, stream, sequence, send instant, first-token instant
(``perf_counter`` seconds; None: no token came), ok."""


# --- the server: paced_server.py, naming each request by its X-Request-ID --------------


def serve(argv: list[str]) -> None:
    """Run ``paced_server.py``'s ``main`` with ``argv``, its log naming each request by the
    ``X-Request-ID`` header when it has one (else by the body's ``bench.id``, as always)."""
    from benchmarks import paced_server as ps

    current: list[str | None] = [None]
    original_received = ps.Paced.data_received
    original_start = ps.Paced.start
    original_init = ps._Stream.__init__
    queues: dict[int, deque[str | None]] = {}

    def data_received(self: ps.Paced, data: bytes) -> None:
        # the ids of the chat requests this call completes, in order, read before the
        # server parses the same bytes (its own parser is left as it is)
        view, pos = self.buf + data, 0
        q = queues.setdefault(id(self), deque())
        while (end := view.find(b"\r\n\r\n", pos)) >= 0:
            length, rid = 0, None
            lines = view[pos:end].split(b"\r\n")
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
                elif name.strip().lower() == b"x-request-id":
                    rid = value.strip().decode("latin-1")
            if len(view) < end + 4 + length:
                break
            pos = end + 4 + length
            method, _, rest = lines[0].partition(b" ")
            if method.lower() == b"post" and rest.partition(b" ")[0].lower().endswith(
                b"/chat/completions"
            ):
                q.append(rid)
        original_received(self, data)

    def start(self: ps.Paced, body: bytes, t_recv: float) -> None:
        q = queues.get(id(self))
        current[0] = q.popleft() if q else None
        try:
            original_start(self, body, t_recv)
        finally:
            current[0] = None

    def init(
        self: ps._Stream,
        proto: ps.Paced,
        first: float,
        n: int,
        prompt: int,
        rid: str,
        t_recv: float,
    ) -> None:
        original_init(self, proto, first, n, prompt, current[0] or rid, t_recv)

    def lost(self: ps.Paced, exc: Exception | None) -> None:
        self.transport = None
        queues.pop(id(self), None)

    ps.Paced.data_received = data_received  # type: ignore[method-assign]
    ps.Paced.start = start  # type: ignore[method-assign]
    ps.Paced.connection_lost = lost  # type: ignore[method-assign]
    ps._Stream.__init__ = init  # type: ignore[method-assign]
    sys.argv = ["paced_server.py", *argv]
    ps.main()


def server(cpu: int | None, log_dir: Path, clock: str) -> Any:
    """The paced server on ``cpu``, started through ``_serve`` (each line of its log
    named by the request's ``X-Request-ID``); its URL and the log it writes when it stops."""
    return paced_server(cpu, log_dir, clock, command=[sys.executable, str(HERE), "_serve"])


# --- the clients' loops (each run in a process of its own) -----------------------------


async def reference_loop(
    url: str, body: bytes, streams: int, duration: float, ramp: float
) -> list[Rec]:
    """``reference_client.py``'s loop, with a first-token stamp and an id per request."""
    import aiohttp

    done: list[Rec] = []
    stop = time.perf_counter() + duration
    connector = aiohttp.TCPConnector(limit=streams)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def loop(u: int) -> None:
            await asyncio.sleep(ramp * u / streams)
            n = 0
            while time.perf_counter() < stop:
                rid = f"ref-u{u}-r{n}"
                headers = {"Content-Type": "application/json", "X-Request-ID": rid}
                t0 = time.perf_counter()
                first: float | None = None
                ok, parts = False, []
                try:
                    async with session.post(url, data=body, headers=headers) as resp:
                        async for line in resp.content:
                            if not line.startswith(b"data:"):
                                continue
                            data = line[5:].strip()
                            if data == b"[DONE]":
                                ok = resp.status == 200
                                continue
                            obj = orjson.loads(data)
                            choices = obj.get("choices")
                            if choices:
                                content = choices[0].get("delta", {}).get("content")
                                if content:
                                    if first is None:
                                        first = time.perf_counter()
                                    parts.append(content)
                except (aiohttp.ClientError, TimeoutError, ValueError):
                    ok = False
                "".join(parts)
                done.append((rid, u, n, t0, first, ok))
                n += 1

        await asyncio.gather(*(loop(u) for u in range(streams)))
    return done


async def chatclient_loop(
    url: str, body: bytes, streams: int, duration: float, ramp: float
) -> list[Rec]:
    """stress's ``ChatClient`` alone in a closed loop, with ids (on ``perf_counter``)."""
    from stress.core.record import RequestRecord
    from stress.net.client import ChatClient

    client = ChatClient(url, {}, POLICY, limit=streams + 4)
    done: list[Rec] = []
    stop = time.perf_counter() + duration

    async def loop(u: int) -> None:
        await asyncio.sleep(ramp * u / streams)
        n = 0
        while time.perf_counter() < stop:
            rid = f"cc-u{u}-r{n}"
            rec = RequestRecord(user=u, conversation=1, round=n, turn=1, request_id=rid)
            await client.chat(body, rec, time.perf_counter())
            t_send = client.t0 + rec.t_start
            first = t_send + rec.ttft_s if rec.ttft_s is not None else None
            done.append((rid, u, n, t_send, first, rec.outcome == "ok"))
            n += 1

    try:
        await asyncio.gather(*(loop(u) for u in range(streams)))
    finally:
        await client.close()
    return done


def client_main(kind: str, argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog=f"ttft_accuracy.py {kind}")
    ap.add_argument("url")
    ap.add_argument("body", type=Path)
    ap.add_argument("--streams", type=int, required=True)
    ap.add_argument("--duration", type=float, required=True)
    ap.add_argument("--ramp", type=float, required=True)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    import uvloop

    loop = reference_loop if kind == "_reference" else chatclient_loop
    url = a.url.rstrip("/") + ("/v1/chat/completions" if kind == "_reference" else "")
    recs = uvloop.run(loop(url, a.body.read_bytes(), a.streams, a.duration, a.ramp))
    a.out.write_bytes(orjson.dumps(recs))


# --- one measured run ----------------------------------------------------------------


@dataclass(slots=True)
class Result:
    """One client's run at one level."""

    who: str
    streams: int
    load: str
    steady: list[float] = field(default_factory=list)
    """Client first-token instant minus the server's written stamp, seconds."""
    first: list[float] = field(default_factory=list)
    lag: list[float] = field(default_factory=list)
    """The server's written minus intended instant, seconds (every matched request)."""
    transit: list[float] = field(default_factory=list)
    """The server's arrival stamp minus the client's send stamp, seconds."""
    requests: int = 0
    failed: int = 0
    unmatched: int = 0
    """Requests with a first token and no line of that id in the server's log."""
    cpu_s: float = 0.0
    wall_s: float = 0.0
    rc: int = 0

    def p(self, q: float, which: str = "steady") -> float:
        v: list[float] = getattr(self, which)
        return float(np.percentile(v, q)) * 1000 if v else float("nan")


def pct(values: list[float]) -> str:
    if not values:
        return "n=0"
    a = np.asarray(values) * 1000
    return (
        f"n={a.size:5d} p50 {np.median(a):6.3f} ms  p90 {np.percentile(a, 90):6.3f}  "
        f"p99 {np.percentile(a, 99):7.3f}  max {a.max():7.3f}"
    )


def launch(cmd: list[str], cpu: int | None, timeout: float, log: Path) -> tuple[int, float, float]:
    """Run ``cmd`` pinned to ``cpu``; exit status, CPU seconds (``wait4``), wall seconds."""
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]  # taskset execs: the pid stays the client's
    t = time.perf_counter()
    with log.open("wb") as out:
        popen = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(popen.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                popen.kill()
                pid, status, usage = os.wait4(popen.pid, 0)
                break
            time.sleep(0.05)
    popen.returncode = rc = os.waitstatus_to_exitcode(status)
    return rc, usage.ru_utime + usage.ru_stime, time.perf_counter() - t


def wall_minus_monotonic() -> float:
    """``time.time() - time.perf_counter()``, the closest of a few readings."""
    best = None
    for _ in range(20):
        a = time.perf_counter()
        w = time.time()
        b = time.perf_counter()
        if best is None or b - a < best[0]:
            best = (b - a, w - (a + b) / 2)
    assert best is not None
    return best[1]


@dataclass(slots=True)
class Run:
    """One client process: exit status, CPU (``wait4``), wall seconds, its requests."""

    rc: int
    cpu_s: float
    wall_s: float
    recs: list[Rec]


def run_stress(url: str, streams: int, args: argparse.Namespace, tmp: Path) -> tuple[Run, Path]:
    spec = bench_spec(args)
    extra = orjson.dumps({"bench": spec}).decode()
    scen = write_scenario(tmp, "ttft", url, args.chunks, extra, ramp=f"{args.ramp * 1000:.0f}ms")
    out = tmp / "runs"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "stress", "run", str(scen), "--out", str(out), "--no-tui"]
    cmd += ["--users", str(streams), "--duration", f"{args.duration}s", "--fail-on", "never"]
    offset = wall_minus_monotonic()
    log = tmp / "client.log"
    rc, cpu, wall = launch(cmd, args.client_cpu, args.duration + 300, log)
    dirs = sorted(out.iterdir()) if out.exists() else []
    if not dirs or not (dirs[-1] / "requests.jsonl").exists():
        raise SystemExit(f"stress run failed ({rc}):\n{log.read_text()[-3000:]}")
    run_dir = dirs[-1]
    t0 = float(orjson.loads((run_dir / "manifest.json").read_bytes())["start_time"]) - offset
    recs: list[Rec] = []
    for line in (run_dir / "requests.jsonl").read_bytes().splitlines():
        r = orjson.loads(line)
        if r.get("request_id") is None or r.get("phase", "main") != "main":
            continue
        send = t0 + float(r["t_start"])
        ttft = r.get("ttft_s")
        first = send + float(ttft) if ttft is not None else None
        recs.append((r["request_id"], int(r["user"]), int(r["round"]), send, first,
                     r["outcome"] == "ok"))  # fmt: skip
    return Run(rc, cpu, wall, recs), log


def run_loop_client(
    who: str, url: str, streams: int, args: argparse.Namespace, tmp: Path
) -> tuple[Run, Path]:
    body = tmp / "body.json"
    body.write_bytes(request_body(args.prompt_tokens, {"bench": bench_spec(args)}))
    out = tmp / "records.json"
    cmd = [sys.executable, str(HERE), f"_{who}", url, str(body), "--streams", str(streams)]
    cmd += ["--duration", str(args.duration), "--ramp", str(args.ramp), "--out", str(out)]
    log = tmp / "client.log"
    rc, cpu, wall = launch(cmd, args.client_cpu, args.duration + 120, log)
    if rc != 0 or not out.exists():
        raise SystemExit(f"{who} client failed ({rc}):\n{log.read_text()[-3000:]}")
    recs = [
        (a, int(u), int(n), s, f, bool(ok)) for a, u, n, s, f, ok in orjson.loads(out.read_bytes())
    ]
    return Run(rc, cpu, wall, recs), log


def bench_spec(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "first_ms": args.first_ms,
        "chunks": args.chunks,
        "gap_ms": args.gap_ms,
        "prompt_tokens": 1000,
    }


@contextlib.contextmanager
def hog(cpu: int | None, on: bool) -> Iterator[None]:
    """A busy loop pinned to ``cpu`` for the duration, when ``on``."""
    if not on:
        yield
        return
    cmd = [sys.executable, "-c", "while True: pass"]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    proc = subprocess.Popen(cmd)
    try:
        time.sleep(0.3)  # running before the client starts
        yield
    finally:
        proc.kill()
        proc.wait()


def measure(who: str, streams: int, load: str, args: argparse.Namespace) -> Result:
    with tempfile.TemporaryDirectory(prefix="stress-ttft-") as d:
        tmp = Path(d)
        with (
            server(args.server_cpu, tmp, args.clock) as (url, log),
            hog(args.client_cpu, load == "hog"),
        ):
            if who == "stress":
                run, _ = run_stress(url, streams, args, tmp)
            else:
                run, _ = run_loop_client(who, url, streams, args, tmp)
        truth = {}
        for line in log.read_bytes().splitlines():
            t = orjson.loads(line)
            truth[t["id"]] = t
    res = Result(who, streams, load, cpu_s=run.cpu_s, wall_s=run.wall_s, rc=run.rc)
    res.requests = len(run.recs)
    res.failed = sum(1 for r in run.recs if not r[5])
    if not run.recs:
        return res
    t_first_send = min(r[3] for r in run.recs)
    first_seq: dict[int, int] = {}
    for _, u, n, *_rest in run.recs:
        first_seq[u] = min(n, first_seq.get(u, n))
    for rid, u, n, send, first, _ok in run.recs:
        if first is None:
            continue
        t = truth.get(rid)
        if t is None:
            res.unmatched += 1
            continue
        err = first - t["t_written"]
        res.lag.append(t["t_written"] - t["t_intended"])
        res.transit.append(t["t_recv"] - send)
        if n == first_seq[u]:
            res.first.append(err)
        elif send >= t_first_send + args.warmup:
            res.steady.append(err)
    return res


def line(res: Result) -> str:
    neg = sum(1 for e in res.steady if e < 0)
    return (
        f"{res.who:<10} {res.streams:4d} streams {res.load:<5}: {res.requests} requests "
        f"({res.failed} not ok, {res.unmatched} unmatched), client cpu "
        f"{res.cpu_s:.2f} s in {res.wall_s:.1f} s, exit {res.rc}\n"
        f"    client error, steady     {pct(res.steady)}  (negative: {neg})\n"
        f"    client error, first wave {pct(res.first)}\n"
        f"    server scheduling lag    {pct(res.lag)}\n"
        f"    send to arrival          {pct(res.transit)}"
    )


# --- reporting -----------------------------------------------------------------------


def ms(values: list[float], digits: int = 3) -> str:
    v = [x for x in values if not np.isnan(x)]
    if not v:
        return "n/a"
    sd = statistics.stdev(v) if len(v) > 1 else 0.0
    return f"{statistics.fmean(v):.{digits}f} ± {sd:.{digits}f}"


def table(results: dict[tuple[int, str, str], list[Result]], args: argparse.Namespace) -> None:
    print(
        f"\n# TTFT error, ms, mean ± sd over {args.repeat} repeat(s); steady state unless "
        "named; ratio per repeat, then averaged",
        flush=True,
    )
    head = (
        f"{'streams':>7} {'load':<5} {'client':<14} {'p50':>15} {'p99':>15} "
        f"{'first-wave p99':>16} {'server lag p99':>16} {'send->arr p50':>15}"
    )
    print(head)
    print("-" * len(head))
    for streams in args.streams:
        for load in args.loads:
            for who in args.clients:
                rs = results.get((streams, load, who), [])
                print(
                    f"{streams:7d} {load:<5} {who:<14} {ms([r.p(50) for r in rs]):>15} "
                    f"{ms([r.p(99) for r in rs]):>15} {ms([r.p(99, 'first') for r in rs]):>16} "
                    f"{ms([r.p(99, 'lag') for r in rs]):>16} "
                    f"{ms([r.p(50, 'transit') for r in rs]):>15}"
                )
            ref = results.get((streams, load, "reference"), [])
            for who in args.clients:
                if who == "reference" or not ref:
                    continue
                rs = results.get((streams, load, who), [])
                r50 = [a.p(50) / b.p(50) for a, b in zip(rs, ref, strict=False) if b.p(50) > 0]
                r99 = [a.p(99) / b.p(99) for a, b in zip(rs, ref, strict=False) if b.p(99) > 0]
                label = f"{who}/ref"
                print(f"{streams:7d} {load:<5} {label:<14} {ms(r50, 2):>15} {ms(r99, 2):>15}")
    sys.stdout.flush()


def main() -> None:
    if sys.argv[1:2] == ["_serve"]:
        serve(sys.argv[2:])
        return
    if sys.argv[1:2] in (["_reference"], ["_chatclient"]):
        client_main(sys.argv[1], sys.argv[2:])
        return
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--streams", type=int, nargs="+", default=[16, 128])
    ap.add_argument("--loads", nargs="+", choices=["quiet", "hog"], default=["quiet", "hog"])
    ap.add_argument(
        "--clients",
        nargs="+",
        choices=["stress", "reference", "chatclient"],
        default=["stress", "reference"],
    )
    ap.add_argument("--repeat", "--repeats", type=int, default=2)
    ap.add_argument(
        "--duration", "--measure", type=float, default=8.0, help="seconds each client runs"
    )
    ap.add_argument(
        "--warmup", type=float, default=1.0, help="seconds after the first send not steady"
    )
    ap.add_argument("--first-ms", type=float, default=100.0, help="the server's 'prefill'")
    ap.add_argument("--chunks", type=int, default=32)
    ap.add_argument("--gap-ms", type=float, default=10.0)
    ap.add_argument(
        "--ramp",
        type=float,
        default=-1.0,
        help="seconds over which the streams start (-1: one request's length; 0: at once)",
    )
    ap.add_argument("--clock", choices=["stream", "step"], default="stream")
    ap.add_argument(
        "--prompt-tokens", type=int, default=250, help="words in the loops' fixed prompt"
    )
    ap.add_argument(
        "--client-cpu",
        type=int,
        default=-2,
        help="-2 (default): the first cpu this script is pinned to, the server's excepted "
        "(`taskset -c 0 ...`: 0); -1: no pinning (and no hog)",
    )
    ap.add_argument("--server-cpu", type=int, default=1, help="-1: no pinning")
    args = ap.parse_args()
    if args.ramp < 0:
        args.ramp = (args.first_ms + args.chunks * args.gap_ms) / 1000
    old = os.sched_getaffinity(0)
    args.server_cpu = None if args.server_cpu < 0 else args.server_cpu
    if args.client_cpu == -2:
        args.client_cpu = min(old - {args.server_cpu} or old)
    args.client_cpu = None if args.client_cpu < 0 else args.client_cpu
    if args.client_cpu is None and "hog" in args.loads:
        raise SystemExit("--loads hog needs --client-cpu: the hog shares the client's core")
    print(
        f"# ttft accuracy; {machine()}; client cpu {args.client_cpu}, server cpu "
        f"{args.server_cpu} ({args.clock} clock); first chunk {args.first_ms:g} ms after "
        f"arrival, then {args.chunks} chunks {args.gap_ms:g} ms apart; streams started over "
        f"{args.ramp:.2f} s; {args.duration:g} s per run, steady from {args.warmup:g} s; "
        f"{time.strftime('%Y-%m-%d %H:%M')}",
        flush=True,
    )
    if args.client_cpu is not None:  # this script keeps off the client's core
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, (set(range(os.cpu_count() or 1)) - {args.client_cpu}) or old)
    results: dict[tuple[int, str, str], list[Result]] = {}
    i = 0
    for r in range(args.repeat):
        for streams in args.streams:
            for load in args.loads:
                order = list(args.clients) if i % 2 == 0 else list(reversed(args.clients))
                i += 1
                for who in order:
                    res = measure(who, streams, load, args)
                    results.setdefault((streams, load, who), []).append(res)
                    print(f"[repeat {r + 1}] {line(res)}", flush=True)
    os.sched_setaffinity(0, old)
    table(results, args)
    print(f"\n# done; {machine()}", flush=True)


if __name__ == "__main__":
    main()
