"""What feeding the live view costs the run, per tick: the snapshot and its pickle.

Why: the live view draws from its own process, but the run's side still builds a
``Snapshot`` 4 times a second and pickles it onto the pipe, on the loop that timestamps
the tokens (issue 15: the paced CPU per chunk with the view on). Here the production
classes (``stress.live.state.Live`` fed finished ``RequestRecord``s,
``stress.live.view_process.Ticks``
and its pickler) are timed with no loop and no pipe: one paced minute of requests (every
user ends a request a second, 10 recent turns each, the 60 s window full), then

- ``snapshot``: ``Live.snapshot`` alone;
- ``tick, none changed``: the snapshot and its encoding when no user's turns changed
  since the last tick (their turns are not sent again);
- ``tick, a quarter changed``: as in a paced run at 4 ticks a second, where each user
  ends a request a second (the cost of recording those requests taken out);
- ``tick, all sent``: the first tick (every user's turns go), and what every tick cost
  when the turns were sent each time;
- ``a quarter changed, the view's 90 rows``: the tick since the view says which rows of
  the users' table it shows (``rows``), as a tall terminal's table asks.

Prints milliseconds per tick (best of ``--repeats``) and the tick's bytes on the pipe:

    taskset -c 0 .venv/bin/python benchmarks/view_tick.py --users 64 256 2000
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import machine
from stress.core.record import RequestRecord
from stress.live.state import Live, Snapshot
from stress.live.view_process import Ticks

WINDOW = (0, 90)
"""The rows a view asks for on a tall terminal: 30 on screen, a screen above and below."""


def finished(live: Live, user: int, t_end: float, n: int) -> None:
    rec = RequestRecord(
        user=user,
        conversation=1,
        round=n,
        turn=n,
        request_id=f"stress-0123abcd-{user}-{n}",
        t_start=t_end - 1.0,
        ttft_s=0.1,
        e2e_s=1.0,
        decode_tok_s=100.0,
        prompt_tokens=5000,
        cached_tokens=4000,
        reusable_tokens=4500,
        completion_tokens=100,
        max_gap_s=0.012,
        conversation_tokens=5000,
    )
    live.on_send(rec)
    live.on_record(rec, t_end)


def in_flight(live: Live, users: int, t: float) -> None:
    for u in range(users):
        rec = RequestRecord(user=u, conversation=1, round=99, turn=1, t_start=t)
        rec.ttft_s, rec.chunks_content, rec.t_last_byte = 0.1, 30, t + 0.5
        live.on_send(rec)


def best(fn: Callable[[], object], n: int, repeats: int) -> float:
    """Milliseconds per call, the best of ``repeats`` runs of ``n`` calls."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - t0) / n)
    return 1e3 * min(times)


def bench(users: int, repeats: int) -> None:
    live = Live(users)
    t = 0.0
    for second in range(120):
        for u in range(users):
            finished(live, u, float(second) + u / users, second)
    t = 120.0
    in_flight(live, users, t)
    now = t + 0.6
    n = max(20, 20_000 // users)

    def take() -> Snapshot:
        return dataclasses.replace(live.snapshot(now), events=())

    snap_ms = best(lambda: live.snapshot(now), n, repeats)
    ticks = Ticks()
    ticks.encode(take(), [], 0)
    size_none = len(ticks.encode(take(), [], 0))
    none_ms = best(lambda: ticks.encode(take(), [], 0), n, repeats)

    quarter = range(0, users, 4)
    k = [0]

    def quarter_tick() -> bytes:
        k[0] += 1
        for u in quarter:  # a quarter of the users ended a turn since the last tick
            finished(live, u, now, 1000 + k[0])
        return ticks.encode(take(), [], 0)

    def quarter_records() -> None:
        k[0] += 1
        for u in quarter:
            finished(live, u, now, 1000 + k[0])

    # the tick alone: the records' own cost (the run's, per request) taken out
    quarter_ms = best(quarter_tick, n, repeats) - best(quarter_records, n, repeats)
    size_quarter = len(quarter_tick())

    def all_tick() -> bytes:
        return Ticks().encode(take(), [], 0)  # a fresh sender: every user's turns go

    all_ms = best(all_tick, n, repeats)
    size_all = len(all_tick())

    # what the run sends since the view says which rows it shows (``rows``): a window
    wticks = Ticks()

    def window_tick() -> bytes:
        k[0] += 1
        for u in quarter:
            finished(live, u, now, 1000 + k[0])
        snap = dataclasses.replace(live.snapshot(now, WINDOW), events=())
        return wticks.encode(snap, [], 0)

    window_tick()
    window_ms = best(window_tick, n, repeats) - best(quarter_records, n, repeats)
    size_window = len(window_tick())
    print(
        f"  {users:5d} users: snapshot {snap_ms:6.3f} ms | tick, none changed {none_ms:6.3f} ms "
        f"({size_none:,} B) | a quarter changed {quarter_ms:6.3f} ms ({size_quarter:,} B) | "
        f"all sent {all_ms:6.3f} ms ({size_all:,} B) | a quarter changed, the view's "
        f"{WINDOW[1]} rows {window_ms:6.3f} ms ({size_window:,} B)",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, nargs="+", default=[64, 256, 2000])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(f"# view_tick: {machine()}; milliseconds per tick, best of {args.repeats}")
    for users in args.users:
        bench(users, args.repeats)


if __name__ == "__main__":
    main()
