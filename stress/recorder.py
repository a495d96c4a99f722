"""The run directory: the full, crash-safe record of a run.

``out/<run_id>/`` holds ``manifest.json`` (what ran, against what, with which versions),
``requests.jsonl`` (one line per finished request), ``events.jsonl`` (warnings, errors,
restarts...), one JSONL file per collector stream (``server.jsonl``, ``gpu.jsonl``) and
``summary.json`` at the end. JSONL lines are buffered and written by a flusher at least
once a second, so after ``kill -9`` every file is valid up to the last flush (a reader
skips a torn last line). Everything written passes through the secret redactor.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import orjson

from stress.events import RunEvent
from stress.record import RequestRecord
from stress.secrets import REDACTOR

_OPTS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


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
    data = REDACTOR.bytes(orjson.dumps(obj, option=_OPTS | orjson.OPT_INDENT_2))
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data + b"\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_manifest(run_dir: Path) -> dict[str, Any]:
    """A run directory's manifest; ``RunDirError`` (one line) if it is not a run."""
    from stress.errors import RunDirError

    path = run_dir / "manifest.json"
    if not run_dir.is_dir() or not path.exists():
        raise RunDirError(
            f"{run_dir} is not a run directory (no manifest.json) -- fix: pass a folder "
            "under out/ made by `stress run`"
        )
    try:
        obj = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError:
        raise RunDirError(f"{path} is damaged (not JSON)") from None
    if not isinstance(obj, dict):
        raise RunDirError(f"{path} is not a JSON object")
    return obj


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete line of a JSONL file; a torn last line (kill -9) is skipped."""
    out: list[dict[str, Any]] = []
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return out
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


class Recorder:
    """Implements the collectors' ``Sink``; owns the run directory's JSONL files."""

    def __init__(self, run_dir: Path, on_event: Callable[[RunEvent], None] | None = None) -> None:
        self.dir = run_dir
        self._files: dict[str, IO[bytes]] = {}
        self._buffers: dict[str, list[bytes]] = {}
        self._on_event = on_event
        self.requests_written = 0
        self.closed = False

    def _buffer(self, stream: str) -> list[bytes]:
        buf = self._buffers.get(stream)
        if buf is None:
            self._files[stream] = open(self.dir / f"{stream}.jsonl", "ab")  # noqa: SIM115
            buf = self._buffers[stream] = []
        return buf

    def write(self, stream: str, record: dict[str, Any]) -> None:
        if not self.closed:
            self._buffer(stream).append(orjson.dumps(record, option=_OPTS))

    def write_request(self, rec: RequestRecord) -> None:
        if not self.closed:
            self._buffer("requests").append(orjson.dumps(rec, option=_OPTS))
            self.requests_written += 1

    def event(self, ev: RunEvent) -> None:
        ev.message = REDACTOR.text(ev.message)
        if not self.closed:
            self._buffer("events").append(orjson.dumps(ev, option=_OPTS))
        if self._on_event is not None:
            self._on_event(ev)

    def flush(self) -> None:
        for stream, buf in self._buffers.items():
            if buf:
                data = REDACTOR.bytes(b"\n".join(buf) + b"\n")
                buf.clear()
                f = self._files[stream]
                f.write(data)
                f.flush()

    def close(self) -> None:
        if self.closed:
            return
        self.flush()
        for f in self._files.values():
            os.fsync(f.fileno())
            f.close()
        self.closed = True
