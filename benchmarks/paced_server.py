"""A minimal paced SSE server that logs when it really wrote each reply's first chunk.

Why: the throughput benchmark's nginx sends a whole reply in a few network reads, but a
real inference server writes about one chunk per read, spaced by the decode step; and the
TTFT accuracy benchmark needs a server that knows when it sent the first token. This one
is a bare ``asyncio.Protocol`` on uvloop (no framework: its own overhead must stay small
and measurable) speaking just enough HTTP/1.1: keep-alive, ``Content-Length`` request
bodies, chunked responses. A POST to ``.../chat/completions`` streams; ``GET /v1/models``
lists one model (so the real ``stress run`` can target it); anything else is a 404.

Each request's JSON body may carry ``"bench": {"id": str, "first_ms": float, "chunks": int,
"gap_ms": float, "prompt_tokens": int}``: headers go out at once, the first chunk
``first_ms`` after the request arrived, then one chunk every ``gap_ms``, then a usage chunk
(reporting ``prompt_tokens``, default 100) and ``[DONE]``. Chunk
instants are absolute deadlines (``loop.call_at``), so one late write does not shift the
rest.

Two clocks (``--clock``):

- ``stream`` (the default): each stream keeps its own, from its request's arrival, as 64
  single-user servers would. Where the streams' chunks fall depends on when each request
  arrived, so on the client: on dev (2 cores, 64 streams, 100-chunk replies) this server
  woke 850 times a second under ``stress run`` and 510-620 under the reference loop of
  ``e2e.py`` for the same 6,400 chunks a second, and the client's wakes follow the
  server's.
- ``step``: one decode step for every stream, every ``--step-ms``, as a batching server
  (vLLM, SGLang, llama.cpp's slots) writes the tokens of one engine step: a request's first
  chunk goes out at the first step at or after ``first_ms`` from its arrival, then one
  chunk each step (its ``gap_ms`` is not used). The steps fall on a fixed grid from the
  server's start, whatever the client does.

For each request it logs, in ``time.perf_counter`` seconds (CLOCK_MONOTONIC on
Linux, the same clock as the client process's): arrival, the intended first-chunk instant
and the instant right after the first chunk was handed to the kernel. On SIGTERM it writes
that log as JSON Lines to ``--log`` and exits.

    taskset -c 1 .venv/bin/python benchmarks/paced_server.py --port 8321 --log /tmp/log.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import math
import signal
import sys
import time
from pathlib import Path
from typing import Any, cast

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import WORDS, vllm_chunk


def framed(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


CHUNKS = [framed(vllm_chunk({"content": w})) for w in WORDS]
LAST = framed(vllm_chunk({"content": "."}, finish="length"))
DONE = framed(b"data: [DONE]\n\n") + b"0\r\n\r\n"
HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
)
LOG: list[tuple[str, float, float, float]] = []
MODEL = "Qwen/Qwen3-30B-A3B"
MODELS = orjson.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]})


def usage(n: int, prompt: int = 100) -> bytes:
    obj = {
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n},
    }
    return framed(b"data: " + orjson.dumps(obj) + b"\n\n")


class Stepper:
    """The ``step`` clock: at each step, the next chunk of every stream that is due, in the
    order the streams started; the timer runs only while a stream is open."""

    def __init__(self, step_s: float) -> None:
        self.step_s = step_s
        self.origin = time.perf_counter()
        self.streams: list[_Stream] = []
        self.due: float | None = None
        """The perf_counter instant of the next step, while the timer runs."""

    def join(self, stream: _Stream) -> None:
        self.streams.append(stream)
        if self.due is None:
            k = math.ceil((time.perf_counter() - self.origin) / self.step_s)
            self._arm(self.origin + k * self.step_s)

    def _arm(self, due: float) -> None:
        self.due = due
        loop = asyncio.get_running_loop()
        loop.call_at(due + loop.time() - time.perf_counter(), self._step)

    def _step(self) -> None:
        step = self.due
        assert step is not None
        left = []
        for st in self.streams:
            # a stream whose first chunk is for a later step waits; one that ended leaves
            if st.first > step or st.write(step):
                left.append(st)
        self.streams = left
        if left:
            self._arm(step + self.step_s)
        else:
            self.due = None


class _Stream:
    """One reply's chunks: ``write`` sends the next; False once the reply has ended."""

    __slots__ = ("first", "i", "n", "prompt", "proto", "rid", "t_recv")

    def __init__(
        self, proto: Paced, first: float, n: int, prompt: int, rid: str, t_recv: float
    ) -> None:
        self.proto = proto
        self.first = first
        self.n = n
        self.prompt = prompt
        self.rid = rid
        self.t_recv = t_recv
        self.i = 0

    def write(self, intended: float) -> bool:
        tr = self.proto.transport
        if tr is None:
            return False
        i = self.i
        if i == 0:
            tr.write(CHUNKS[0])
            LOG.append((self.rid, self.t_recv, intended, time.perf_counter()))
        elif i < self.n - 1:
            tr.write(CHUNKS[i % len(CHUNKS)])
        else:
            tr.write(LAST + usage(self.n, self.prompt) + DONE)
            return False
        self.i = i + 1
        return True


STEPPER: Stepper | None = None
"""The ``step`` clock, when the server runs one."""


class Paced(asyncio.Protocol):
    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def data_received(self, data: bytes) -> None:
        t_recv = time.perf_counter()
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1").lower()
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name == "content-length":
                    length = int(value)
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            method, _, rest = head.partition(" ")
            path = rest.partition(" ")[0]
            if method == "post" and path.endswith("/chat/completions"):
                self.start(body, t_recv)
            elif method == "get" and path.endswith("/v1/models"):
                self.answer(b"200 OK", MODELS)
            else:  # the real CLI's probes (/health, /metrics, /tokenize...): not served
                self.answer(b"404 Not Found", b"")

    def answer(self, status: bytes, body: bytes) -> None:
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (status, len(body), body)
        )

    def start(self, body: bytes, t_recv: float) -> None:
        spec: dict[str, Any] = {}
        if body:
            spec = orjson.loads(body).get("bench") or {}
        first = t_recv + float(spec.get("first_ms", 10.0)) / 1000
        gap = float(spec.get("gap_ms", 10.0)) / 1000
        n = int(spec.get("chunks", 100))
        prompt = int(spec.get("prompt_tokens", 100))
        rid = str(spec.get("id", ""))
        assert self.transport is not None
        self.transport.write(HEAD)
        stream = _Stream(self, first, n, prompt, rid, t_recv)
        if STEPPER is not None:
            STEPPER.join(stream)
            return
        # deadlines are kept in perf_counter seconds; the loop's clock has its own origin
        offset = self.loop.time() - time.perf_counter()

        def send() -> None:
            i = stream.i
            if stream.write(first + i * gap):
                self.loop.call_at(first + (i + 1) * gap + offset, send)

        self.loop.call_at(first + offset, send)


async def serve(port: int, log: Path) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Paced, "127.0.0.1", port, backlog=4096)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    print(f"paced server on 127.0.0.1:{port}", flush=True)
    await stop.wait()
    server.close()
    with log.open("wb") as f:
        for rid, t_recv, intended, written in LOG:
            f.write(
                orjson.dumps(
                    {"id": rid, "t_recv": t_recv, "t_intended": intended, "t_written": written}
                )
                + b"\n"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--log", type=Path, required=True)
    ap.add_argument(
        "--clock",
        choices=("stream", "step"),
        default="stream",
        help="stream: each stream paced from its own arrival; step: one decode step for all",
    )
    ap.add_argument("--step-ms", type=float, default=10.0, help="the step clock's period")
    args = ap.parse_args()
    global STEPPER
    if args.clock == "step":
        STEPPER = Stepper(args.step_ms / 1000)
    import uvloop

    uvloop.run(serve(args.port, args.log))


if __name__ == "__main__":
    main()
