"""``stress capacity`` in a real terminal: each pass runs the live view, whose header
says where the search stands (step, pass, bracket so far, finished steps' verdicts).

The CLI runs in a pseudo-terminal (``pty``), as a user starts it, so the test covers the
production path: the terminal check, the app on the run's own loop, the header's extra
line, and the terminal restored between passes.
"""

from __future__ import annotations

import os
import pty
import re
import select
import struct
import subprocess
import sys
import time
from fcntl import ioctl
from pathlib import Path
from termios import TIOCSWINSZ

import orjson
import pytest

from tests.search.test_capacity_cli import SCENARIO

HEADER_ROW_3 = rb"\x1b\[3;1H(?:\x1b\[[0-9;]*m)*"
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\x1b[=>]")


def run_in_terminal(args: list[str], cols: int, rows: int, timeout: float) -> tuple[int, bytes]:
    """Run ``python -m stress ARGS`` attached to a new pseudo-terminal of that size; all
    it wrote, and its exit code."""
    master, slave = pty.openpty()
    ioctl(slave, TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = os.environ | {"TERM": "xterm-256color", "COLUMNS": str(cols), "LINES": str(rows)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "stress", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        close_fds=True,
    )
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    else:
        proc.kill()
    os.close(master)
    return proc.wait(timeout=30), bytes(out)


@pytest.mark.slow
@pytest.mark.parametrize("cols", [80, 200])
def test_the_live_view_shows_where_the_search_stands(tmp_path: Path, cols: int) -> None:
    path = tmp_path / "slots.yaml"
    # the live view is under test, not the machine: an SLO no busy machine misses (the
    # search's 0.4 s is 80 ms of wall time at time_scale 5, within a loaded loop's lag)
    assert "ttft_p95: 0.4s" in SCENARIO
    path.write_text(SCENARIO.replace("ttft_p95: 0.4s", "ttft_p95: 20s"))
    out = tmp_path / "out"
    # two steps of one pass each (2 and 4 users: both meet the SLO), ~10 s of passes
    code, screen = run_in_terminal(
        [
            "capacity",
            str(path),
            "--out",
            str(out),
            "--start",
            "2",
            "--max-users",
            "4",
            "--repeat",
            "1",
        ],
        cols,
        40,
        timeout=300,
    )
    text = ANSI.sub(b"", screen).decode("utf-8", "replace")
    assert code == 0, text[-3000:]
    (root,) = out.iterdir()
    doc = orjson.loads((root / "capacity.json").read_bytes())
    assert [s["value"] for s in doc["steps"]] == [2, 4]
    # the header's third line, drawn by the live view of each pass at row 3 (the plain
    # lines the search prints between passes are not: they have no cursor position)
    for step in ("step 1: 2 users, pass 1/1", "step 2: 4 users, pass 1/1 · bracket [2-?]"):
        drawn = HEADER_ROW_3 + re.escape(f"capacity search · {step}".encode())
        assert re.search(drawn, screen), step
    if cols >= 200:
        assert "capacity search · step 2: 4 users, pass 1/1 · bracket [2-?] · done 2:MET" in text
    assert "capacity at SLO (TTFT p95 <= 20 s): >= 4 users" in text
