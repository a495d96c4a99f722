"""TTFT measurement error: the client's first-token instant against the server's own log.

Why: a client whose event loop lags adds the lag to every TTFT it reports. The paced
server (``paced_server.py``, on another core) logs, on the shared CLOCK_MONOTONIC clock,
the instant each reply's first chunk went to the kernel; the real ``ChatClient`` on uvloop
records the instant it read it (``t_start + ttft_s``). The difference is the measurement
error: loopback transit, the client's wake-up and parsing, and any event-loop lag.

Each request asks for a first chunk after a random 20-200 ms "prefill" and then 32 chunks
at 10 ms. Reported separately, so the error is attributed honestly:

- steady state: every request but the first of each stream;
- first wave: the first request of each stream (connection set-up, all streams at once);
- the server's own scheduling lag (written minus intended instant), which is not
  client error but shows how quiet the machine was.

    taskset -c 0 .venv/bin/python benchmarks/ttft_accuracy.py               # 16 and 128
    taskset -c 0 .venv/bin/python benchmarks/ttft_accuracy.py --streams 16 --measure 30
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (
    Window,
    drive,
    machine,
    paced_server,
    request_body,
    run_loop,
)
from stress.core.record import RequestRecord


def pct(values: list[float]) -> str:
    if not values:
        return "n=0"
    a = np.abs(np.asarray(values)) * 1000
    return (
        f"n={a.size:5d} median {np.median(a):6.3f} ms  p90 {np.percentile(a, 90):6.3f}  "
        f"p99 {np.percentile(a, 99):7.3f}  max {a.max():7.3f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, nargs="+", default=[16, 128])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--measure", type=float, default=15.0)
    ap.add_argument("--server-cpu", type=int, default=1)
    args = ap.parse_args()
    print(f"# ttft accuracy; {machine()}; server on cpu {args.server_cpu}", flush=True)
    rng = random.Random(7)
    for streams in args.streams:
        medians: list[float] = []
        for r in range(args.repeats):

            def body(u: int, n: int, s: int = streams, r: int = r) -> bytes:
                spec = {"id": f"{s}-{r}-{u}-{n}", "first_ms": rng.uniform(20, 200)}
                return request_body(200, {"bench": {**spec, "chunks": 32, "gap_ms": 10.0}})

            def keep(rec: RequestRecord) -> bool:
                return rec.ttft_s is not None

            truth = {}
            with tempfile.TemporaryDirectory() as tmp:
                with paced_server(args.server_cpu, Path(tmp)) as (url, log):
                    # no warm-up: the first wave is part of what this measures (apart)
                    win = run_loop(
                        lambda s=streams: drive(url, s, body, 0.0, args.measure, keep=keep)
                    )
                for line in log.read_bytes().splitlines():
                    t = orjson.loads(line)
                    truth[t["id"]] = t
            assert isinstance(win, Window)
            steady: list[float] = []
            first: list[float] = []
            lag: list[float] = []
            for rec in win.records:
                rid = f"{streams}-{r}-{rec.user}-{rec.round}"
                t = truth.get(rid)
                if t is None or rec.ttft_s is None:
                    continue
                err = rec.t_start + rec.ttft_s - t["t_written"]
                (first if rec.round == 0 else steady).append(err)
                lag.append(t["t_written"] - t["t_intended"])
            neg = sum(1 for e in steady if e < 0)
            print(f"streams={streams:4d} run={r} cpu={100 * win.cpu_s / win.wall_s:4.1f}%")
            print(f"  client error, steady     {pct(steady)}  (negative: {neg})")
            print(f"  client error, first wave {pct(first)}")
            print(f"  server scheduling lag    {pct(lag)}", flush=True)
            if steady:
                medians.append(float(np.median(np.abs(steady))) * 1000)
        if medians:
            print(
                f"streams={streams:4d} steady median abs error over runs: "
                f"mean {np.mean(medians):.3f} ms (min {min(medians):.3f}, "
                f"max {max(medians):.3f}, n={len(medians)})",
                flush=True,
            )


if __name__ == "__main__":
    main()
