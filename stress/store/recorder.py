"""The run directory: the full, crash-safe record of a run.

``out/<run_id>/`` holds ``manifest.json`` (what ran, against what, with which versions),
``requests.jsonl`` (one line per finished request), ``tokens.bin`` (when each chunk of
generated text arrived, per request: ``stress.store.token_times``), ``events.jsonl`` (warnings,
errors, restarts...), one JSONL file per collector stream (``server.jsonl``,
``gpu.jsonl``) and ``summary.json`` at the end. Lines and frames are buffered and written
by a flusher at least once a second, so after ``kill -9`` every file is valid up to the
last flush (a reader skips a torn last line or frame). Every JSONL line passes through the
secret redactor (``tokens.bin`` holds request ids and float seconds only).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import time
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from stress.core.events import RunEvent
from stress.core.record import RequestRecord
from stress.core.secrets import REDACTOR
from stress.store.token_times import FILE_NAME as TOKENS_FILE
from stress.store.token_times import TokenTimesFile

_OPTS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
MAX_IN_FLIGHT_LISTED = 1000


def new_run_dir(out: Path, scenario_name: str) -> Path:
    """``out/<UTC time>-<scenario>``: sorts by time, names the scenario, never reused."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    base = out / f"{stamp}-{scenario_name}"
    path, n = base, 1
    while True:
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            n += 1
            path = Path(f"{base}-{n}")


def write_json(path: Path, obj: Any) -> None:
    """Write a JSON document atomically (temp file + rename), redacted."""
    data = REDACTOR.json(orjson.dumps(obj, option=_OPTS | orjson.OPT_INDENT_2))
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data + b"\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:  # a full disk: the old file stays whole, no half-written temp is left
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


RESERVE_BYTES = 64 * 1024
"""Disk space the recorder holds back (``state.json.reserve``) and gives up at the end when
the disk filled: the last state.json, with what was sent and what could not be written,
then still fits (and the manifest's last rewrite, most often)."""

FLUSH_LINES = 256
"""Request lines (and their token frames) are written as soon as this many are buffered,
besides the once-a-second flush: a second of lines at 2,000 requests a second is megabytes
joined at once, and glibc kept the heap that held them (+26 MiB of RSS at 256 streams)."""


class Recorder:
    """Implements the collectors' ``Sink``; owns the run directory's JSONL files.

    A line stays in its buffer until it is on disk: a failed write (a full disk) is cut
    back to the last complete line and retried at the next flush, and the first failure is
    kept in ``error`` and shown at once as a ``recorder_failed`` event (the run decides to
    stop). ``state.json`` says at every flush how many requests were sent, how many have a
    line on disk and which are in flight, so a ``kill -9`` leaves a count of what it cost;
    after a failure it says how many records could not be written and why, and the last
    one is written into the space of ``state.json.reserve`` when the disk is full.
    """

    def __init__(
        self,
        run_dir: Path,
        on_event: Callable[[RunEvent], None] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.dir = run_dir
        self._fds: dict[str, int] = {}
        self._buffers: dict[str, list[bytes]] = {}
        self._torn: set[str] = set()
        """Streams whose file may end in a partial line: the next write starts a new one."""
        self._on_event = on_event
        t0 = time.perf_counter()
        self._clock = clock or (lambda: time.perf_counter() - t0)
        self._in_flight: dict[int, RequestRecord] = {}
        self._tokens = TokenTimesFile(run_dir / TOKENS_FILE)
        self._reserve = _hold_space(run_dir / "state.json.reserve", RESERVE_BYTES)
        self.sent = 0
        """Requests handed to the client so far (``request_started``)."""
        self.requests_written = 0
        """Request records accepted (buffered or on disk)."""
        self.requests_recorded = 0
        """Request records on disk."""
        self.error: OSError | None = None
        """The first write failure; the run stops and exits 1 when set."""
        self.closed = False

    # --- accepting lines ---------------------------------------------------------------

    def _buffer(self, stream: str) -> list[bytes]:
        buf = self._buffers.get(stream)
        if buf is None:
            buf = self._buffers[stream] = []
        return buf

    def write(self, stream: str, record: dict[str, Any]) -> None:
        if not self.closed:
            self._buffer(stream).append(_dumps_line(record))

    def request_started(self, rec: RequestRecord) -> None:
        """The engine is about to send ``rec``: it counts as in flight until written."""
        self.sent += 1
        self._in_flight[id(rec)] = rec

    def write_request(self, rec: RequestRecord, token_times: array[float] | None = None) -> None:
        """Accept the record's line and, when ``token_times`` holds the receive times of
        its text chunks, its ``tokens.bin`` frame (keyed by ``rec.request_id``)."""
        self._in_flight.pop(id(rec), None)
        if not self.closed:
            buf = self._buffer("requests")
            buf.append(_dumps_line(rec))
            self.requests_written += 1
            if token_times and rec.request_id is not None:
                self._tokens.add(rec.request_id, rec.ttft_s, token_times)
            if len(buf) >= FLUSH_LINES and self.error is None:
                self._write_requests()

    def _write_requests(self) -> None:
        """Write the buffered request lines and token frames now, between the flushes
        (state.json waits for the next one); a failure is kept for the flush to report."""
        try:
            self._write_lines("requests", self._buffer("requests"))
            self._tokens.flush()
        except OSError as e:
            self._failed("requests", e)

    def event(self, ev: RunEvent) -> None:
        ev.message = REDACTOR.text(ev.message)
        if not self.closed:
            self._buffer("events").append(_dumps_line(ev))
        if self._on_event is not None:
            self._on_event(ev)

    # --- writing -----------------------------------------------------------------------

    def flush(self) -> bool:
        """Write every buffered line; False if a stream could not be written (kept)."""
        ok = True
        for stream, buf in list(self._buffers.items()):
            if buf:
                try:
                    self._write_lines(stream, buf)
                except OSError as e:
                    ok = False
                    self._failed(stream, e)
        try:
            self._tokens.flush()
        except OSError as e:
            ok = False
            self._failed("tokens", e, TOKENS_FILE)
        self._write_state(finished=False)
        return ok

    def _write_lines(self, stream: str, buf: list[bytes]) -> None:
        fd = self._fds.get(stream)
        if fd is None:
            path = self.dir / f"{stream}.jsonl"
            fd = self._fds[stream] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        lead = b"\n" if stream in self._torn else b""
        data = lead + REDACTOR.json(b"\n".join(buf) + b"\n")
        start = os.lseek(fd, 0, os.SEEK_END)
        done = 0
        try:
            while done < len(data):
                done += os.write(fd, data[done:])
        except OSError:
            self._cut_back(stream, fd, start, data[:done], buf)
            raise
        self._torn.discard(stream)
        if stream == "requests":
            self.requests_recorded += len(buf)
        buf.clear()

    def _cut_back(self, stream: str, fd: int, start: int, written: bytes, buf: list[bytes]) -> None:
        """After a partial write: keep the whole lines that reached the file, cut off the
        torn end, and leave the rest in the buffer; the file ends on a complete line."""
        cut = written.rfind(b"\n") + 1  # the end of the last whole line written
        lead = 1 if written.startswith(b"\n") else 0  # a record never starts with one
        complete = max(0, min(written[:cut].count(b"\n") - lead, len(buf)))
        try:
            os.ftruncate(fd, start + cut)
            if cut:
                self._torn.discard(stream)
        except OSError:  # cannot truncate: the next write starts on a fresh line
            if written and not written.endswith(b"\n"):
                self._torn.add(stream)
            elif written:
                self._torn.discard(stream)
        if stream == "requests":
            self.requests_recorded += complete
        del buf[:complete]

    def _failed(self, stream: str, e: OSError, file: str | None = None) -> None:
        if self.error is not None:
            return
        self.error = e
        ev = RunEvent(
            self._clock(),
            "recorder_failed",
            f"cannot write {file or f'{stream}.jsonl'} in {self.dir}: {e.strerror or e} -- "
            "stopping the run; lines are kept in memory and retried",
            "error",
            source="recorder",
            data={"stream": stream, "error": e.strerror or str(e)},
        )
        self.event(ev)

    @property
    def unwritten_requests(self) -> int:
        """Request records accepted but not on disk."""
        return len(self._buffers.get("requests", ()))

    def _write_state(self, *, finished: bool) -> None:
        """``state.json``: sent, recorded and in flight; best effort, never raises."""
        flying = list(self._in_flight.values())
        state = {
            "t": round(self._clock(), 3),
            "sent": self.sent,
            "recorded": self.requests_recorded,
            "in_flight_count": len(flying),
            "in_flight": [
                {"user": r.user, "round": r.round, "phase": r.phase, "t_start": r.t_start}
                for r in flying[:MAX_IN_FLIGHT_LISTED]
            ],
            "finished": finished,
        }
        if self.error is not None:
            state["unwritten"] = self.unwritten_requests
            state["write_error"] = self.error.strerror or str(self.error)
        data = _dumps_line(state) + b"\n"
        if not _replace(self.dir / "state.json", data) and finished:
            self._release_reserve()  # the last count matters most: give it the room
            _replace(self.dir / "state.json", data)

    def _release_reserve(self) -> None:
        if self._reserve is not None:
            with contextlib.suppress(OSError):
                self._reserve.unlink()
            self._reserve = None

    def close(self) -> None:
        """Last flush (a retry after a failure), fsync, close; never raises."""
        if self.closed:
            return
        self.flush()
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.fsync(fd)
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()
        self._tokens.close()
        self.closed = True
        self._write_state(finished=True)
        self._release_reserve()


def _replace(path: Path, data: bytes) -> bool:
    """Write ``path`` atomically (temp file + rename); False, leaving the old file whole
    and no temp behind, when it cannot be written."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return False
    return True


def _hold_space(path: Path, size: int) -> Path | None:
    """A file of ``size`` allocated bytes (not a sparse one: those free nothing when
    removed); None when the disk has not even that."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError:
        return None
    allocate = getattr(os, "posix_fallocate", None)  # not on macOS
    try:
        try:
            if allocate is None:
                raise OSError(errno.ENOSYS, "no posix_fallocate")
            allocate(fd, 0, size)
        except OSError as e:  # a file system without fallocate: write the bytes
            if e.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
            os.write(fd, bytes(size))
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    os.close(fd)
    return path


def _dumps_line(obj: Any) -> bytes:
    """One JSON line; a value orjson cannot write becomes null, named in ``unserializable``.

    The line is copied into a bytes object of its own size: orjson (3.12+) returns its
    output buffer rounded up (16 KiB for a 1 KiB request record) and never shrinks it, and
    a second of buffered records at 1,700 requests/s held ~27 MiB instead of ~2. The copy
    costs ~0.1 us."""
    try:
        return bytes(memoryview(orjson.dumps(obj, option=_OPTS)))
    except TypeError:  # orjson.JSONEncodeError: e.g. an integer >= 2**64
        pass
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    bad: list[str] = []
    clean = _sanitize(obj, "", bad)
    if isinstance(clean, dict):
        clean["unserializable"] = bad
    return bytes(memoryview(orjson.dumps(clean, option=_OPTS)))


def _sanitize(value: Any, path: str, bad: list[str]) -> Any:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            key = k if isinstance(k, str) else str(k)
            out[key] = _sanitize(v, f"{path}.{key}" if path else key, bad)
        return out
    if isinstance(value, list | tuple):
        return [_sanitize(v, f"{path}[{i}]", bad) for i, v in enumerate(value)]
    try:
        orjson.dumps(value, option=_OPTS)
    except TypeError:
        bad.append(path or "(value)")
        return None
    return value
