"""The pipe between a run's parent process and its workers (``--workers``).

A frame is a 4-byte big-endian length and an orjson array of messages; each message is a
short array whose first item names it. Request records and events are slotted dataclasses
that orjson writes directly, so a record costs one ``orjson.dumps`` in the worker and one
``orjson.loads`` in the parent. The receive times of a reply's chunks (``tokens.bin``'s
frames) travel as base64 of the float64 array: exact, and a few microseconds for
thousands of tokens.

Worker -> parent (``stress.runtime.worker`` writes, ``stress.runtime.pool`` applies)::

    ["hello", pid]                       started; the pipe works (over TCP, a Ray
                                         worker adds its token and node: stress.runtime.ray_pool)
    ["ping", t_ns]                       syncing its clock with the parent's (Ray only)
    ["ready", clock]                     set up (session, corpus, tokenizer): send "go";
                                         clock: the measured skew and round trip, or {}
    ["s", seq, record]                   a request is about to be sent (in flight)
    ["f", last_byte, [[seq, t_sched, t_start, ttft_s, chunks_content, chunks_reasoning,
          t_last_byte, request_id], ...]]   in-flight progress (what the live view reads)
    ["r", seq, record, t_end, times]     a request's one record; times: base64 or null
    ["e", event]                         a run event
    ["u", user, state, until]            a user's live state
    ["p", phase]                         the live view's phase text
    ["w", stream, line]                  a collector line (the worker's own health)
    ["h", health]                        the worker's latest health, for the live view
    ["x", reason]                        the engine stopped starting turns (duration...)
    ["d", index, exit_reason, requests]  phase ``index`` ended in this worker
    ["bye", health_summary]              the last message: the worker exits normally
    ["err", message]                     the worker could not set up; it exits

Parent -> worker::

    [config]                             the first frame: what to run (``stress.runtime.pool``)
    ["pong", t_ns, parent_t_ns]          the answer to a ping: the parent's perf clock
    ["clock", t0_ns, wall_t0]            the run clock's origin (perf ns) and wall time
    ["go", index, t_phase]               run phase ``index`` from perf time ``t_phase``
                                         (the parent's clock; a worker subtracts its skew)
    ["stop", reason]                     no new turns; finish requests in flight
    ["cancel"]                           cancel requests in flight (each still recorded)
    ["quit"]                             no more phases: say bye and exit
"""

from __future__ import annotations

import asyncio
import base64
import struct
from array import array
from typing import Any

import orjson

_LEN = struct.Struct(">I")
MAX_FRAME = 1 << 30
"""A frame longer than this is a broken pipe, not a message."""


def frame(messages: list[Any]) -> bytes:
    """One length-prefixed frame of ``messages`` (dataclasses written by orjson)."""
    body = orjson.dumps(messages, option=orjson.OPT_SERIALIZE_NUMPY)
    return _LEN.pack(len(body)) + body


async def read_frame(reader: asyncio.StreamReader) -> list[Any] | None:
    """The next frame's messages; None at the end of the stream (the writer is gone, or
    it died in the middle of a frame: a torn frame is the end too)."""
    try:
        head = await reader.readexactly(_LEN.size)
        (n,) = _LEN.unpack(head)
        if n > MAX_FRAME:
            return None
        body = await reader.readexactly(n)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    out: list[Any] = orjson.loads(body)
    return out


def pack_times(times: array[float] | None) -> str | None:
    return base64.b64encode(times.tobytes()).decode("ascii") if times else None


def unpack_times(text: str | None) -> array[float] | None:
    if not text:
        return None
    out = array("d")
    out.frombytes(base64.b64decode(text))
    return out
