"""Streamed chunks per second per client core, against nginx serving a static SSE body.

Why: a Python server cannot feed a Python client fast enough to find the client's limit.
nginx (from Debian's packages, pinned to another core) answers every POST with a
pre-generated vLLM-shaped stream (N content chunks, a usage chunk, ``[DONE]``), so the
client core is the bottleneck and what it manages per CPU-second is the client's ceiling.
The driver is the real ``ChatClient`` (its own pool, ``stress.net.http1``), on uvloop.

Prints, per concurrency level and repeat: chunks per wall second, chunks per client
CPU-second (the figure that does not depend on how busy the shared machine is), CPU use of
the client core, errors, and RSS after the level.

    taskset -c 0 .venv/bin/python benchmarks/throughput.py            # 16..2000 streams
    taskset -c 0 .venv/bin/python benchmarks/throughput.py --streams 64 --repeats 5
    # long replies and prompts (issue target: no cliff at 100k-token prompts, 32k replies):
    taskset -c 0 .venv/bin/python benchmarks/throughput.py --chunks 32768 \
        --prompt-tokens 100000 --streams 1 4 16 --measure 10
"""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (
    Window,
    drive,
    machine,
    mean_spread,
    nginx,
    request_body,
    rss_mib,
    run_loop,
    sse_body,
)


async def level(url: str, streams: int, body: bytes, warmup: float, measure: float) -> Window:
    return await drive(url, streams, body, warmup, measure)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, nargs="+", default=[16, 64, 256, 1024, 2000])
    ap.add_argument("--chunks", type=int, default=256, help="content chunks per reply")
    ap.add_argument("--prompt-tokens", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--measure", type=float, default=5.0)
    ap.add_argument("--server-cpu", type=int, default=1)
    args = ap.parse_args()
    reply = sse_body(args.chunks)
    body = request_body(args.prompt_tokens)
    print(
        f"# throughput: {args.chunks}-chunk replies ({len(reply):,} B), "
        f"{len(body):,} B requests; {machine()}; nginx on cpu {args.server_cpu}",
        flush=True,
    )
    with nginx({"b": reply}, cpu=args.server_cpu) as root:
        url = root + "/b"
        for streams in args.streams:
            wall: list[float] = []
            per_cpu: list[float] = []
            for r in range(args.repeats):
                win = run_loop(lambda s=streams: level(url, s, body, args.warmup, args.measure))
                assert isinstance(win, Window)
                gc.collect()
                wall.append(win.chunks_per_wall_s)
                per_cpu.append(win.chunks_per_cpu_s)
                print(
                    f"streams={streams:5d} run={r} chunks/s={win.chunks_per_wall_s:10,.0f} "
                    f"chunks/cpu-s={win.chunks_per_cpu_s:10,.0f} "
                    f"cpu={100 * win.cpu_s / win.wall_s:5.1f}% "
                    f"requests={win.requests} errors={win.errors} rss={rss_mib():.0f}MiB",
                    flush=True,
                )
            print(f"streams={streams:5d} chunks/s      {mean_spread(wall)}")
            print(f"streams={streams:5d} chunks/cpu-s  {mean_spread(per_cpu)}", flush=True)


if __name__ == "__main__":
    main()
