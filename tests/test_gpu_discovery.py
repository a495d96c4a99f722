"""The GPU pre-flight's child process: answered, stopped early, cancelled, or hung."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from stress import gpu_discovery
from stress.gpu_discovery import GpuDiscovery


async def test_the_child_answers_with_a_summary() -> None:
    found = await GpuDiscovery().result()
    assert isinstance(found.get("summary"), str) and found["summary"]


def test_discarding_stops_a_child_still_running() -> None:
    found = GpuDiscovery()
    proc = found._proc
    assert proc is not None
    found.discard()
    assert proc.returncode is not None  # killed or done, and reaped: no zombie left
    assert "stopped" in asyncio.run(found.result())["summary"]


async def test_a_cancelled_wait_stops_the_child() -> None:
    found = GpuDiscovery()
    proc = found._proc
    assert proc is not None
    task = asyncio.ensure_future(found.result())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(100):  # the waiting thread reaps it once killed
        if proc.poll() is not None:
            break
        await asyncio.sleep(0.05)
    assert proc.returncode is not None


async def test_a_child_that_hangs_is_a_summary_at_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real process that never answers (an NVML call stuck in the driver)."""
    hang = tmp_path / "hang"
    hang.write_text("#!/bin/sh\nexec sleep 60\n")
    hang.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(hang))
    monkeypatch.setattr(gpu_discovery, "GPU_PREFLIGHT_TIMEOUT_S", 0.5)
    found = GpuDiscovery()
    proc = found._proc
    assert proc is not None
    summary = (await found.result())["summary"]
    assert summary == "GPU discovery did not answer within 0.5 s"
    assert proc.returncode is not None
