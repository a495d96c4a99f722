"""The recorder on real files: nothing it accepted is lost, every line it leaves is valid.

A full disk is a real one: a small tmpfs mounted for the test (skipped, with the reason,
where it cannot be mounted). Values orjson cannot write become null and are named.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from stress.core.events import RunEvent
from stress.core.record import RequestRecord
from stress.runtime.background import flusher
from stress.store.recorder import Recorder
from stress.store.token_times import FILE_NAME as TOKENS_FILE
from stress.store.token_times import ReadReport, read_frames


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 512 KiB tmpfs, unmounted afterwards whatever happens."""
    d = tmp_path / "disk"
    d.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no `mount` command: cannot make a small disk to fill")
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(d)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {proc.stderr.strip()}")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


def fill(disk: Path, leave: int) -> Path:
    """Fill ``disk`` and then give back about ``leave`` bytes; the filler's path."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"x" * 65536)
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"x")
        os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave))
    finally:
        os.close(fd)
    return filler


def record(i: int) -> RequestRecord:
    return RequestRecord(user=i % 7, conversation=1, round=i, turn=1, error="e" * 400)


def lines(path: Path) -> list[dict[str, Any]]:
    """Every line of a JSONL file; fails the test on any line that is not valid JSON."""
    if not path.exists():
        return []
    data = path.read_bytes()
    assert not data or data.endswith(b"\n"), "the file ends in a partial line"
    return [orjson.loads(x) for x in data.splitlines()]


def test_values_orjson_cannot_write_become_null_and_are_named(tmp_path: Path) -> None:
    rec = record(1)
    rec.prompt_tokens = 2**64
    rec.completion_tokens = -(2**64)
    rec.server_timings = {"prompt_n": 2**70, "ok": 3, "nested": [1, 2**65]}
    seen: list[RunEvent] = []
    r = Recorder(tmp_path, on_event=seen.append)
    r.write_request(rec)
    r.write("server", {"t": 1.0, "kv_blocks": 2**64 + 5, "fine": "yes"})
    r.event(RunEvent(2.0, "restart", "counter went back", "error", data={"was": 2**80}))
    r.close()
    [req] = lines(tmp_path / "requests.jsonl")
    assert req["prompt_tokens"] is None and req["completion_tokens"] is None
    assert req["server_timings"] == {"prompt_n": None, "ok": 3, "nested": [1, None]}
    assert req["unserializable"] == [
        "prompt_tokens",
        "completion_tokens",
        "server_timings.prompt_n",
        "server_timings.nested[1]",
    ]
    assert req["round"] == 1 and req["error"] == "e" * 400  # the rest is intact
    [srv] = lines(tmp_path / "server.jsonl")
    assert srv == {"t": 1.0, "kv_blocks": None, "fine": "yes", "unserializable": ["kv_blocks"]}
    [ev] = lines(tmp_path / "events.jsonl")
    assert ev["data"] == {"was": None} and ev["unserializable"] == ["data.was"]
    assert [e.kind for e in seen] == ["restart"]
    assert r.requests_written == r.requests_recorded == 1


def test_state_json_counts_sent_recorded_and_in_flight(tmp_path: Path) -> None:
    r = Recorder(tmp_path, clock=lambda: 12.5)
    recs = [record(i) for i in range(3)]
    for rec in recs:
        r.request_started(rec)
    recs[1].t_start = 4.25
    r.write_request(recs[0])
    r.flush()
    state = orjson.loads((tmp_path / "state.json").read_bytes())
    assert state["t"] == 12.5 and state["finished"] is False
    assert (state["sent"], state["recorded"], state["in_flight_count"]) == (3, 1, 2)
    assert state["in_flight"][0] == {"user": 1, "round": 1, "phase": "main", "t_start": 4.25}
    r.write_request(recs[1])
    r.write_request(recs[2])
    r.close()
    state = orjson.loads((tmp_path / "state.json").read_bytes())
    assert (state["sent"], state["recorded"], state["in_flight_count"]) == (3, 3, 0)
    assert state["finished"] is True
    assert not (tmp_path / "state.json.tmp").exists()


def test_a_full_disk_loses_no_line_and_leaves_the_file_valid(small_disk: Path) -> None:
    """A write that fills the disk part-way is cut back to the last whole line and kept;
    once there is room again, every record is written exactly once, in order."""
    seen: list[RunEvent] = []
    r = Recorder(small_disk, on_event=seen.append)
    r.write_request(record(0))
    assert r.flush()
    filler = fill(small_disk, leave=8192)
    for i in range(1, 60):  # ~60 KiB: far more than the room left
        r.write_request(record(i))
    assert not r.flush()
    on_disk = lines(small_disk / "requests.jsonl")  # whole lines kept, the torn end cut off
    assert 1 < len(on_disk) < 60 and [x["round"] for x in on_disk] == list(range(len(on_disk)))
    assert r.requests_recorded == len(on_disk) and r.unwritten_requests == 60 - len(on_disk)
    assert not r.flush()  # still full: still kept, and reported once only
    assert len(lines(small_disk / "requests.jsonl")) == len(on_disk)
    [ev] = seen
    assert ev.kind == "recorder_failed" and ev.severity == "error"
    assert ev.data == {"stream": "requests", "error": "No space left on device"}
    assert isinstance(r.error, OSError)
    filler.unlink()
    r.close()
    got = lines(small_disk / "requests.jsonl")
    assert [x["round"] for x in got] == list(range(60))
    assert r.requests_recorded == 60 and r.unwritten_requests == 0
    # the failure event itself reached the file once there was room
    assert [e["kind"] for e in lines(small_disk / "events.jsonl")] == ["recorder_failed"]


def test_a_file_that_cannot_be_cut_back_gets_no_duplicate_and_no_torn_line(
    tmp_path: Path,
) -> None:
    """/dev/full takes nothing and cannot be truncated: the lines stay in the buffer."""
    (tmp_path / "requests.jsonl").symlink_to("/dev/full")
    seen: list[RunEvent] = []
    r = Recorder(tmp_path, on_event=seen.append)
    r.write_request(record(0))
    r.write_request(record(1))
    assert not r.flush()
    assert r.unwritten_requests == 2 and r.requests_recorded == 0
    r.close()  # retries, fails again, does not raise
    assert [e.kind for e in seen] == ["recorder_failed"]
    assert orjson.loads((tmp_path / "state.json").read_bytes())["finished"] is True


async def test_the_flusher_stops_the_run_when_a_write_fails(small_disk: Path) -> None:
    """The flusher survives the failure, reports it live, and asks the run to stop."""
    seen: list[RunEvent] = []
    r = Recorder(small_disk, on_event=seen.append)
    fill(small_disk, leave=0)
    stops: list[str] = []
    stopped = asyncio.Event()

    def on_failure() -> None:
        stops.append("recorder_failed")
        stopped.set()

    stop = asyncio.Event()
    task = asyncio.create_task(flusher(r, stop, on_failure))
    r.write_request(record(0))
    await asyncio.wait_for(stopped.wait(), timeout=30)  # the flusher runs once a second
    assert not task.done()  # it did not die
    r.write_request(record(1))
    stop.set()
    await asyncio.wait_for(task, timeout=30)
    assert stops and set(stops) == {"recorder_failed"}
    assert [e.kind for e in seen] == ["recorder_failed"]
    assert r.unwritten_requests == 2
    assert lines(small_disk / "requests.jsonl") == []


# --- tokens.bin: the chunk times beside requests.jsonl ---------------------------------


def timed(i: int, n: int) -> tuple[RequestRecord, array[float]]:
    """Record ``i`` with ``n`` text chunks 10 ms apart, its first 0.5 s after the send."""
    rec = record(i)
    rec.request_id = f"run-u{i % 7}-r{i}"
    rec.ttft_s = 0.5
    return rec, array("d", (100.0 + 0.5 + 0.01 * k for k in range(n)))


def frames(path: Path) -> tuple[list[tuple[str, list[float]]], ReadReport]:
    report = ReadReport()
    got = [(rid, [round(float(x), 6) for x in v]) for rid, v in read_frames(path, report)]
    return got, report


def test_token_times_are_one_frame_per_request_keyed_by_its_id(tmp_path: Path) -> None:
    r = Recorder(tmp_path)
    for i in range(3):
        r.write_request(*timed(i, n=3 + i))
    r.write_request(record(9), array("d"))  # no text chunk: no frame
    no_id = record(10)
    r.write_request(no_id, array("d", [1.0, 2.0]))  # not sent by the engine: no id, no frame
    assert r.flush()
    r.close()
    got, report = frames(tmp_path / TOKENS_FILE)
    assert report.damaged is None and report.frames == 3
    assert [rid for rid, _ in got] == ["run-u0-r0", "run-u1-r1", "run-u2-r2"]
    for (_, values), n in zip(got, (3, 4, 5), strict=True):
        assert values == [0.5] + [0.01] * (n - 1)  # TTFT, then the gaps
    assert len(lines(tmp_path / "requests.jsonl")) == 5


def test_a_torn_last_frame_is_left_out_and_said(tmp_path: Path) -> None:
    """``kill -9`` in the middle of a write: the frames before it read, the reader says why
    it stopped."""
    r = Recorder(tmp_path)
    r.write_request(*timed(0, n=4))
    r.flush()
    whole = (tmp_path / TOKENS_FILE).read_bytes()
    r.write_request(*timed(1, n=4))
    r.close()
    data = (tmp_path / TOKENS_FILE).read_bytes()
    (tmp_path / TOKENS_FILE).write_bytes(data[: len(whole) + 9])
    got, report = frames(tmp_path / TOKENS_FILE)
    assert [rid for rid, _ in got] == ["run-u0-r0"]
    assert report.damaged == "torn last frame" and report.skipped_bytes == 9
    (tmp_path / TOKENS_FILE).write_bytes(b"garbage!" + data[8:])
    got, report = frames(tmp_path / TOKENS_FILE)
    assert got == [] and report.damaged == "not a tokens.bin file (bad magic)"


def test_a_full_disk_loses_no_frame_and_leaves_the_file_valid(small_disk: Path) -> None:
    """Like requests.jsonl: a write that fills the disk part-way is cut back to the last
    whole frame and the rest kept; the run is told once; with room again, every frame is
    written exactly once, in order."""
    seen: list[RunEvent] = []
    r = Recorder(small_disk, on_event=seen.append)
    r.write_request(*timed(0, n=10))
    assert r.flush()
    filler = fill(small_disk, leave=64 * 1024)  # room for the lines, not for the frames
    for i in range(1, 40):  # ~310 KiB of frames
        r.write_request(*timed(i, n=2000))
    assert not r.flush()
    assert len(lines(small_disk / "requests.jsonl")) == 40
    got, report = frames(small_disk / TOKENS_FILE)
    assert report.damaged is None and 1 < len(got) < 40  # whole frames only
    assert [rid for rid, _ in got] == [f"run-u{i % 7}-r{i}" for i in range(len(got))]
    [ev] = seen
    assert ev.kind == "recorder_failed"
    assert "tokens.bin" in ev.message and ev.data["stream"] == "tokens"
    filler.unlink()
    r.close()
    got, report = frames(small_disk / TOKENS_FILE)
    assert report.damaged is None
    assert [rid for rid, _ in got] == [f"run-u{i % 7}-r{i}" for i in range(40)]


def test_a_full_batch_of_request_lines_is_written_before_the_flush(tmp_path: Path) -> None:
    """At thousands of requests a second a second of lines is megabytes: every
    ``FLUSH_LINES`` lines (and their token frames) go to disk at once, in order, and
    the once-a-second flush writes the rest and state.json."""
    from stress.store.recorder import FLUSH_LINES

    rec = Recorder(tmp_path)
    n = 2 * FLUSH_LINES + 10
    for i in range(n):
        r = RequestRecord(user=0, conversation=1, round=i + 1, turn=1)
        r.request_id = f"n-u0-r{i + 1}"
        r.ttft_s = 0.1
        rec.write_request(r, array("d", [1.0, 1.5]))
    lines = (tmp_path / "requests.jsonl").read_bytes().splitlines()
    assert len(lines) == 2 * FLUSH_LINES and rec.unwritten_requests == 10
    assert [orjson.loads(x)["round"] for x in lines] == list(range(1, 2 * FLUSH_LINES + 1))
    assert len(list(read_frames(tmp_path / TOKENS_FILE))) == 2 * FLUSH_LINES
    assert not (tmp_path / "state.json").exists()
    assert rec.flush()
    assert len((tmp_path / "requests.jsonl").read_bytes().splitlines()) == n
    assert orjson.loads((tmp_path / "state.json").read_bytes())["recorded"] == n
    rec.close()
