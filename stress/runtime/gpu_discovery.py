"""The GPU pre-flight's child process (``python -m stress.runtime.gpu_preflight``), started and
awaited.

Light on purpose (the standard library and orjson): ``stress run`` starts it before its own
imports, so NVML's start-up on a GPU host (a quarter of a second and more) overlaps them
instead of delaying the first request (issue 15).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from typing import Any

import orjson

NICE = 10
"""The child's niceness: it yields the core to the run's start where they share one."""
GPU_PREFLIGHT_TIMEOUT_S = 60.0
"""An NVML that does not answer in this long is reported, not waited for."""


class GpuDiscovery:
    """``stress.runtime.gpu_preflight`` in a child process, started when this is made (no event
    loop needed: ``stress run`` starts it before its own imports, so NVML's start-up on a
    GPU host overlaps them instead of delaying the first request); a failure or a hang is
    a summary line."""

    def __init__(self) -> None:
        self._deadline = time.monotonic() + GPU_PREFLIGHT_TIMEOUT_S
        self._error: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._found: dict[str, Any] | None = None
        self._waiting = False
        """A thread is in ``communicate`` (it reaps the child once killed)."""
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "stress.runtime.gpu_preflight"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError as e:
            self._error = f"GPU discovery could not start: {e}"
            return
        # niced from its first instruction (the interpreter's own start-up included), so
        # where both share a core the run's start comes first: set from here, at once,
        # since the child's own os.nice would come only after its imports
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, self._proc.pid, NICE)

    async def result(self) -> dict[str, Any]:
        """What the child found (waits for it, in a thread: the loop stays free)."""
        if self._found is not None:
            return self._found
        proc = self._proc
        if proc is None:
            return {"summary": self._error or "GPU discovery was stopped"}
        wait = max(0.0, self._deadline - time.monotonic())
        self._waiting = True
        try:
            out, err = await asyncio.to_thread(proc.communicate, timeout=wait)
        except subprocess.TimeoutExpired:
            self._waiting = False
            self.discard()
            return {"summary": f"GPU discovery did not answer within {GPU_PREFLIGHT_TIMEOUT_S:g} s"}
        except asyncio.CancelledError:  # the run ended before it needed the answer
            self.discard()
            raise
        self._proc, self._waiting = None, False
        try:
            found = orjson.loads(out) if proc.returncode == 0 else None
        except orjson.JSONDecodeError:
            found = None
        if not isinstance(found, dict):
            last = (err.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
            found = {"summary": f"GPU discovery failed (exit {proc.returncode}): {last[:200]}"}
        self._found = found
        return found

    def discard(self) -> None:
        """Stop the child if it still runs (a run that ended early, a bad scenario)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.kill()
        if not self._waiting:  # else the waiting thread's communicate reaps it
            with contextlib.suppress(subprocess.TimeoutExpired, OSError, ValueError):
                proc.communicate(timeout=5)
