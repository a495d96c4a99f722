"""A full disk during a run: the run stops cleanly, says so in one line, exits 1, and every
line written so far is intact (the issue: 13 finished requests, 0 lines, exit 70).

The disk is a 512 KiB tmpfs mounted for the test (we run as root in CI); where it cannot
be mounted the test is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.harness import (
    MARGIN_S,
    RunResult,
    assert_all_jsonl_valid,
    assert_no_traceback,
    assert_truthful,
    cli_process,
    jsonl,
    run_report,
    wait_until,
    write_scenario,
)
from tests.reliability.hostile import hostile

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 512 KiB tmpfs, unmounted afterwards."""
    mount = shutil.which("mount")
    if mount is None:
        pytest.skip("no mount command: cannot make a small disk")
    where = tmp_path / "disk"
    where.mkdir()
    proc = subprocess.run(
        [mount, "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {proc.stderr.strip()}")
    try:
        yield where
    finally:
        done = subprocess.run(["umount", str(where)], capture_output=True, timeout=30)
        if done.returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30)


def fill(folder: Path) -> None:
    """Take every free byte of the file system holding ``folder``."""
    with open(folder / "filler", "wb", buffering=0) as f:
        for size in (1 << 16, 1 << 12, 1):
            block = b"\0" * size
            while True:
                try:
                    f.write(block)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break


async def full_disk_run(tmp_path: Path, small_disk: Path) -> tuple[RunResult, int]:
    """A run whose disk fills after its first two lines: its result, and how many
    requests the server received."""
    drain = 10.0
    out = small_disk / "out"
    plan = write_scenario(tmp_path, users=2, rounds=None, duration=120.0, drain_s=drain)
    async with hostile("ok") as server, cli_process(plan, out, server.url) as cli:

        def lines_on_disk() -> int:
            runs = [p for p in out.iterdir() if p.is_dir()] if out.exists() else []
            path = runs[0] / "requests.jsonl" if runs else None
            if path is None or not path.exists():
                return 0
            return path.read_bytes().count(b"\n")

        await wait_until("2 lines on disk", lambda: lines_on_disk() >= 2, MARGIN_S, cli.proc)
        fill(small_disk)
        result = await cli.finish(drain + MARGIN_S, out)
        return result, server.received


async def test_full_disk_stops_the_run_cleanly(tmp_path: Path, small_disk: Path) -> None:
    result, received = await full_disk_run(tmp_path, small_disk)
    assert_no_traceback(result)
    assert result.rc == 1, f"exit {result.rc}, expected 1; stderr: {result.stderr[-800:]}"
    message = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(message) == 1, f"expected one line on stderr, got: {message}"
    assert "space" in message[0].lower() or "disk" in message[0].lower(), message[0]
    assert_all_jsonl_valid(result.dir)
    recs = jsonl(result.dir / "requests.jsonl")
    assert len(recs) >= 2
    assert_truthful(recs)
    assert len(recs) <= received
    with contextlib.suppress(FileNotFoundError):
        os.unlink(small_disk / "filler")  # room for the report below
    report = await run_report(result.dir)
    assert_no_traceback(report)
    assert report.rc == 0, report.stderr


async def test_the_report_after_a_full_disk_says_what_was_lost(
    tmp_path: Path, small_disk: Path
) -> None:
    """Sent, recorded and lost to the disk, from the run directory alone (state.json's last
    count, written into the space the recorder held back), never "the run was killed"."""
    result, received = await full_disk_run(tmp_path, small_disk)
    assert result.rc == 1, result.stderr
    lines = len(jsonl(result.dir / "requests.jsonl"))
    lost = received - lines
    assert lost >= 1, f"the disk cost no record ({lines} lines, {received} received)"
    state = result.state()
    assert state["finished"] is True, state
    assert (state["sent"], state["recorded"], state["unwritten"]) == (received, lines, lost)
    assert "space" in state["write_error"].lower(), state
    assert not (result.dir / "state.json.reserve").exists()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(small_disk / "filler")
    report = await run_report(result.dir)
    assert report.rc == 0, report.stderr
    said = f"{received:,} sent, {lines:,} recorded, {lost:,} lost to the disk (No space left"
    assert said in report.stdout, report.stdout
    assert "killed" not in report.stdout and "did not finish" not in report.stdout
    summary = result.summary()
    assert summary["complete"] is True
    acct = summary["accounting"]
    assert (acct["killed"], acct["lost_to_disk"], acct["no_record"]) == (False, lost, lost)
    assert summary["verdict"]["status"] == "FAIL"
