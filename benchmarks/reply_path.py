"""The reply path alone: Python CPU per paced chunk, one chunk per network read.

Why: on a paced stream (a token per read, as real servers write them) the client's own
Python per chunk is what ``stress run`` can still cut (issue 15: paced CPU per chunk); a
whole-run benchmark measures it only through the kernel's and the loop's costs, with a
spread wider than a change of a tenth of a microsecond. Here the production classes
(``stress.net.http1.Connection`` with its httptools parser, ``stress.net.reply.ReplyReader`` with
its SSE parser, orjson and the record) are fed a recorded vLLM-shaped reply read by read,
with no socket and no loop wake: the figure is the Python a read costs, nothing else.

Prints, best of ``--repeats``, microseconds per chunk for 100-chunk replies (the head and
the request's record included, spread over its chunks) and per request for the same
reply, one read per chunk:

    taskset -c 0 .venv/bin/python benchmarks/reply_path.py
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from array import array
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import WORDS, machine, vllm_chunk
from stress.core.record import RequestRecord
from stress.net.deadlines import Watchdog
from stress.net.http1 import Connection, Endpoint, Pool
from stress.net.reply import Clock, Reply, ReplyReader

HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def framed(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def reads(chunks: int) -> list[bytes]:
    """What a paced server's reads carry: the head, a chunk each, usage and [DONE]."""
    out = [HEAD]
    out += [framed(vllm_chunk({"content": WORDS[i % len(WORDS)]})) for i in range(chunks)]
    usage = (
        b'data: {"id":"x","object":"chat.completion.chunk","choices":[],"usage":'
        b'{"prompt_tokens":1000,"completion_tokens":%d,"total_tokens":%d}}\n\n'
        % (chunks, chunks + 1000)
    )
    out.append(framed(usage))
    out.append(framed(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    return out


class _Transport:
    def writelines(self, data: Any) -> None:
        pass

    def is_closing(self) -> bool:
        return False


async def one_pass(data: list[bytes], n: int) -> float:
    """Seconds of CPU for ``n`` requests fed ``data`` read by read."""
    pool = Pool(Endpoint.parse("http://127.0.0.1:1"), limit=1, connect_s=1.0)
    conn = Connection(pool)
    conn.connection_made(_Transport())  # type: ignore[arg-type]
    clock = Clock(time.perf_counter(), time.perf_counter())
    task = asyncio.current_task()
    assert task is not None
    t0 = time.process_time()
    for _ in range(n):
        rec = RequestRecord(user=0, conversation=1, round=1, turn=1)
        now = time.perf_counter()
        wd = Watchdog(task, now)
        reader = ReplyReader(clock, "http://x", rec, Reply(), now, wd, array("d"))
        conn.send(b"POST / HTTP/1.1\r\n\r\n", b"", reader)
        for d in data:
            conn.data_received(d)
        assert reader.done.done() and rec.chunks_content == len(data) - 3, rec
    return time.process_time() - t0


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=100)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    data = reads(args.chunks)
    await one_pass(data, 50)  # warm
    best = min([await one_pass(data, args.requests) for _ in range(args.repeats)])
    per_req = best / args.requests
    print(f"# {machine()}")
    print(
        f"reply path, one read per chunk: {1e6 * per_req / args.chunks:.3f} us/chunk "
        f"({1e6 * per_req:.1f} us per {args.chunks}-chunk request), best of {args.repeats}"
    )


if __name__ == "__main__":
    asyncio.run(main())
