"""The built-in simulator in its own process, for ``stress run --target sim``.

The simulator tokenizes prompts of tens of thousands of tokens and schedules every stream;
sharing the client's event loop would put that cost into the client's timings and make a
demo report "the load generator itself was overloaded". So ``stress run`` starts it as a
child process (``python -m stress sim --port 0``), waits for the line that says where it
listens, and stops it when the run ends.

The child runs in its own session, so the terminal's Ctrl-C reaches only the run (which
then finishes the requests in flight against a simulator still serving them); it watches
its stdin, a pipe from this process, and stops when that closes, so a client killed
outright leaves no simulator behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import orjson

from stress.config.sim import SimConfig
from stress.core.errors import TargetError

READY = re.compile(r" at (http://[0-9.]+:[0-9]+) ")
START_TIMEOUT_S = 120.0
"""Generous on purpose: a cold start on a busy 2-core machine imports numpy and aiohttp
(~0.3 s when warm); the wait ends as soon as the line arrives or the child exits."""
STOP_TIMEOUT_S = 10.0


@dataclass(slots=True)
class SimProcess:
    """A simulator child process; ``url`` is the server root (no ``/v1``)."""

    url: str
    config: SimConfig
    proc: asyncio.subprocess.Process
    stderr_path: Path
    config_path: Path

    async def close(self) -> None:
        """Stop the child (SIGTERM, then SIGKILL after ``STOP_TIMEOUT_S``); never raises."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), STOP_TIMEOUT_S)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                await self.proc.wait()
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        for p in (self.stderr_path, self.config_path):
            with contextlib.suppress(OSError):
                p.unlink()


async def start_sim_process(config: SimConfig) -> SimProcess:
    """Start ``stress sim`` with ``config`` on a free loopback port; TargetError (one line)
    when it does not come up."""
    fd, cfg_name = tempfile.mkstemp(prefix="stress-sim-", suffix=".json")
    with os.fdopen(fd, "wb") as f:
        f.write(orjson.dumps(config.model_dump(mode="json", exclude_none=True)))
    err_fd, err_name = tempfile.mkstemp(prefix="stress-sim-", suffix=".log")
    cfg_path, err_path = Path(cfg_name), Path(err_name)
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "stress",
            "sim",
            "--port",
            "0",
            "--config",
            cfg_name,
            "--quiet",
            "--stop-on-stdin-eof",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=err_fd,
            start_new_session=True,  # Ctrl-C in the terminal stops the run, not the server
        )
    finally:
        os.close(err_fd)
    sim = SimProcess("", config, proc, err_path, cfg_path)
    try:
        sim.url = await asyncio.wait_for(_ready_url(proc), START_TIMEOUT_S)
    except (TimeoutError, TargetError) as e:
        tail = _tail(err_path)
        await sim.close()
        why = str(e) or f"no answer in {START_TIMEOUT_S:g} s"
        raise TargetError(
            f"the built-in simulator did not start ({why}{': ' + tail if tail else ''}) -- "
            "fix: run `stress sim --port 0` to see its error"
        ) from None
    return sim


async def _ready_url(proc: asyncio.subprocess.Process) -> str:
    assert proc.stdout is not None
    while True:
        line = await proc.stdout.readline()
        if not line:
            code = await proc.wait()
            raise TargetError(f"it exited with code {code}")
        m = READY.search(line.decode("utf-8", "replace"))
        if m:
            return m.group(1)


def _tail(path: Path, limit: int = 300) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""
    last = text.splitlines()[-1] if text else ""
    return last[-limit:]
