"""SSE parser speed: events per second on typical streams, and one huge line.

Why: ``SSEParser.feed`` runs once per network read on the event loop, for every stream at
once, so it must stay cheap on the common case (small events, one or many per read) and
linear on the hostile one (a single 10 MB line arriving in 4 KiB reads used to take
seconds and freeze every other stream). No network: the bytes are cut the way reads cut
them and fed straight to the parser, so the figure is the parser's alone.

Prints, best of ``--repeats``: events per second with one event per read, with 4 KiB
reads (several events per read, events split across reads), with CRLF line ends, and the
time to take a 10 MB line in 4 KiB reads. ``--parser FILE`` loads ``SSEParser`` from
another copy of ``sse.py`` (an older version, to compare):

    taskset -c 0 .venv/bin/python benchmarks/sse_parser.py
    taskset -c 0 .venv/bin/python benchmarks/sse_parser.py --parser /tmp/old_sse.py
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import machine, sse_body


def load_parser(path: str | None) -> Callable[[], Any]:
    if path is None:
        from stress.net.sse import SSEParser

        return SSEParser
    spec = importlib.util.spec_from_file_location("sse_under_test", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SSEParser  # type: ignore[no-any-return]


def cut(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def per_event(data: bytes) -> list[bytes]:
    """One read per event, as a server that flushes each chunk and a fast network give."""
    return [e + b"\n\n" for e in data.split(b"\n\n") if e]


def parse(factory: Callable[[], Any], reads: list[bytes]) -> tuple[int, float]:
    """Events parsed and seconds taken for one stream."""
    p = factory()
    n = 0
    t0 = time.perf_counter()
    for r in reads:
        n += len(p.feed(r))
    n += len(p.close())
    return n, time.perf_counter() - t0


def best(factory: Callable[[], Any], reads: list[bytes], streams: int, repeats: int) -> float:
    """Best events per second over ``repeats`` passes of ``streams`` streams."""
    rates = []
    for _ in range(repeats):
        events = 0
        seconds = 0.0
        for _ in range(streams):
            n, s = parse(factory, reads)
            events += n
            seconds += s
        rates.append(events / seconds)
    return max(rates)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parser", help="a copy of sse.py to load SSEParser from")
    ap.add_argument("--chunks", type=int, default=256, help="content chunks per reply")
    ap.add_argument("--streams", type=int, default=200, help="replies per pass")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--line-mb", type=float, default=10.0)
    args = ap.parse_args()
    factory = load_parser(args.parser)
    body = sse_body(args.chunks)
    crlf = body.replace(b"\n", b"\r\n")
    print(
        f"# sse_parser: {args.parser or 'stress.net.sse'}; {args.chunks}-chunk replies "
        f"({len(body):,} B), {args.streams} per pass, best of {args.repeats}; {machine()}"
    )
    cases = {
        "one event per read": per_event(body),
        "4 KiB reads": cut(body, 4096),
        "4 KiB reads, CRLF": cut(crlf, 4096),
    }
    for name, reads in cases.items():
        rate = best(factory, reads, args.streams, args.repeats)
        print(f"{name:<22} {rate:>14,.0f} events/s")
    size = int(args.line_mb * 1_000_000)
    line = b"data: " + b"x" * size + b"\n\n"
    reads = cut(line, 4096)
    times = []
    for _ in range(min(args.repeats, 3)):
        try:
            _, s = parse(factory, reads)
        except ValueError as e:  # a parser with a bound below the line's size
            print(f"{args.line_mb:g} MB line: refused ({e})")
            break
        times.append(s)
    else:
        print(f"{args.line_mb:g} MB line, 4 KiB reads {min(times):>10.3f} s")


if __name__ == "__main__":
    main()
