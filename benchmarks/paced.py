"""Client-core busy time per chunk when the server paces one chunk per network read.

Why: real inference servers write about one chunk per decode step, so the client pays its
per-read overhead (a wake-up, a read, the SSE split, one JSON parse) on every chunk; the
throughput benchmark's nginx hides that by sending many chunks per read. Here
``paced_server.py`` (on another core) streams 64 concurrent replies of ``--chunks`` chunks,
one every 10 ms, and the real ``ChatClient`` on uvloop reads them. The figure is the
client process's CPU time (user + system, ``os.times``) over the window, divided by the
chunks it received: target at most 33 us.

    taskset -c 0 .venv/bin/python benchmarks/paced.py               # 64 streams, 3 runs
    taskset -c 0 .venv/bin/python benchmarks/paced.py --streams 16 64 256 --repeats 5
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, nargs="+", default=[64])
    ap.add_argument("--chunks", type=int, default=100, help="chunks per reply")
    ap.add_argument("--gap-ms", type=float, default=10.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--measure", type=float, default=10.0)
    ap.add_argument("--server-cpu", type=int, default=1)
    args = ap.parse_args()
    body = request_body(
        200, {"bench": {"first_ms": args.gap_ms, "chunks": args.chunks, "gap_ms": args.gap_ms}}
    )
    print(
        f"# paced: one chunk per {args.gap_ms:g} ms per stream, {args.chunks}-chunk replies; "
        f"{machine()}; server on cpu {args.server_cpu}",
        flush=True,
    )
    with paced_server(args.server_cpu) as (url, _log):
        for streams in args.streams:
            us: list[float] = []
            for r in range(args.repeats):
                win = run_loop(lambda s=streams: drive(url, s, body, args.warmup, args.measure))
                assert isinstance(win, Window)
                us.append(win.cpu_us_per_chunk)
                print(
                    f"streams={streams:4d} run={r} chunks={win.chunks:,} "
                    f"chunks/s={win.chunks_per_wall_s:8,.0f} "
                    f"cpu={100 * win.cpu_s / win.wall_s:5.1f}% "
                    f"busy/chunk={win.cpu_us_per_chunk:5.1f}us errors={win.errors}",
                    flush=True,
                )
            m = sum(us) / len(us)
            print(
                f"streams={streams:4d} busy us/chunk  mean {m:.1f} "
                f"(min {min(us):.1f}, max {max(us):.1f}, n={len(us)}) "
                + orjson.dumps({"all": [round(u, 1) for u in us]}).decode(),
                flush=True,
            )


if __name__ == "__main__":
    main()
