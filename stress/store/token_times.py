"""``tokens.bin``: when each chunk of generated text arrived, per request, beside requests.jsonl.

The client appends the receive time of every chunk that carried text (content or reasoning)
to a per-request ``array('d')``; when the request ends, the recorder turns it into one
frame of float32 seconds and buffers it; the run's flusher writes the frames with the
JSONL lines, at least once a second. Memory is bounded: a frame leaves memory at the
flush after its request ended.

Framing, all little-endian::

    file   = MAGIC frame*                       MAGIC = b"STKGAPS1" (8 bytes)
    frame  = b"TK" | u16 id_len | u32 n | request_id (UTF-8, id_len bytes) | n x float32
    values = [ttft, gap_1, ..., gap_{n-1}]

``ttft`` is the seconds from the request's send to its first text chunk (``ttft_s`` of
its ``requests.jsonl`` line), each ``gap_k`` the seconds between text chunks k and k+1.
``np.cumsum(values)`` gives every chunk's time after the send. Seconds are wall seconds,
like ``requests.jsonl`` (a time-scaled simulator run is rescaled by the reader). A frame
is keyed by the record's ``request_id``; a request without text chunks has no frame.

Crash safety follows ``stress.store.recorder``: a write is whole frames appended; a write that
fails part-way (a full disk) is cut back to the last whole frame and the rest stays
buffered for the next flush, so after ``kill -9`` or a full disk the file is valid up to
its last whole frame. A reader stops at a torn or damaged frame and says so.
"""

from __future__ import annotations

import contextlib
import os
import struct
import sys
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from operator import sub
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the reader's arrays; the writer (the run path) needs no numpy
    import numpy as np
    import numpy.typing as npt

FILE_NAME = "tokens.bin"
MAGIC = b"STKGAPS1"
SYNC = b"TK"
_HEAD = struct.Struct("<2sHI")
MAX_ID_BYTES = 1024
MAX_VALUES = 1 << 26
"""Frames claiming more values than this are damage, not a reply (64 Mi chunks)."""

_NAN = float("nan")
_BIG_ENDIAN = sys.byteorder == "big"


def encode_frame(request_id: str, ttft_s: float | None, times: array[float]) -> bytes:
    """One frame: the request's id, then its time to first text chunk and the gaps
    between its text chunks (``times``: the chunks' ``perf_counter`` receive times).
    Plain Python (``array('f')`` holds IEEE float32, as numpy's ``<f4`` does), so the run
    path loads no numpy."""
    rid = request_id.encode("utf-8")[:MAX_ID_BYTES]
    n = len(times)
    values = array("f")
    if n:
        values.append(_NAN if ttft_s is None else ttft_s)
        values.extend(map(sub, times[1:], times))
        if _BIG_ENDIAN:
            values.byteswap()
    return _HEAD.pack(SYNC, len(rid), n) + rid + values.tobytes()


class TokenTimesFile:
    """The writer of ``tokens.bin``: frames buffered, written whole, cut back on failure."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._frames: list[bytes] = []
        self.frames_written = 0

    @property
    def pending(self) -> int:
        """Frames accepted and not on disk yet."""
        return len(self._frames)

    def add(self, request_id: str, ttft_s: float | None, times: array[float]) -> None:
        if times:
            self._frames.append(encode_frame(request_id, ttft_s, times))

    def flush(self) -> None:
        """Append every buffered frame; ``OSError`` after a failed write, whose whole
        frames stay on disk and whose rest stays buffered (the file ends on a frame)."""
        if not self._frames:
            return
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        fd = self._fd
        start = os.lseek(fd, 0, os.SEEK_END)
        lead = MAGIC if start == 0 else b""
        data = lead + b"".join(self._frames)
        done = 0
        try:
            while done < len(data):
                done += os.write(fd, data[done:])
        except OSError:
            self._cut_back(fd, start, len(lead), done)
            raise
        self.frames_written += len(self._frames)
        self._frames.clear()

    def _cut_back(self, fd: int, start: int, lead: int, done: int) -> None:
        """Keep the whole frames that reached the file, cut the torn end off."""
        keep, whole = 0, 0
        if done >= lead:
            end = lead
            for frame in self._frames:
                if end + len(frame) > done:
                    break
                end += len(frame)
                whole += 1
            keep = end if whole else 0  # a magic alone is rewritten with the next frames
        with contextlib.suppress(OSError):
            os.ftruncate(fd, start + keep)
        self.frames_written += whole
        del self._frames[:whole]

    def close(self) -> None:
        """fsync and close; never raises (a failed flush was already reported)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.fsync(self._fd)
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


@dataclass(slots=True)
class ReadReport:
    """What reading ``tokens.bin`` met: frames read, and whether it ended early."""

    frames: int = 0
    damaged: str | None = None
    """Why the reader stopped before the end (a torn last frame after a kill, a damaged
    file), None when it read to the end."""
    skipped_bytes: int = 0


def read_frames(
    path: Path, report: ReadReport | None = None
) -> Iterator[tuple[str, npt.NDArray[np.float32]]]:
    """Each frame of ``path`` as (request_id, float32 values), streamed from the file in
    order (one frame in memory at a time). A missing file yields nothing; a torn or
    damaged frame ends the iteration, noted in ``report``. ``OSError`` if it cannot be
    read at all."""
    import numpy as np  # the reader's arrays (the end of a run, the report)

    report = report if report is not None else ReadReport()
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below, after the generator's last frame
    except FileNotFoundError:
        return
    with f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return
        if f.read(len(MAGIC)) != MAGIC:
            report.damaged = "not a tokens.bin file (bad magic)"
            report.skipped_bytes = size
            return
        pos = len(MAGIC)
        while pos < size:
            head = f.read(_HEAD.size)
            if len(head) < _HEAD.size:
                report.damaged = "torn last frame"
                break
            sync, id_len, n = _HEAD.unpack(head)
            if sync != SYNC or id_len > MAX_ID_BYTES or n > MAX_VALUES:
                report.damaged = f"damaged frame at byte {pos}"
                break
            if pos + _HEAD.size + id_len + 4 * n > size:  # never read past the end
                report.damaged = "torn last frame"
                break
            body = f.read(id_len + 4 * n)
            rid = body[:id_len].decode("utf-8", "replace")
            pos += _HEAD.size + len(body)
            report.frames += 1
            yield rid, np.frombuffer(body, dtype="<f4", offset=id_len, count=n)
        report.skipped_bytes = size - pos
