"""The GPU pre-flight's child process: answered, stopped early, cancelled, or hung."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from stress.runtime import gpu_discovery
from stress.runtime.gpu_discovery import GpuDiscovery


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


def _slow_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, delay_s: float) -> GpuDiscovery:
    """A real child that answers after ``delay_s`` with a card and memory held on it."""
    child = tmp_path / "child"
    child.write_text(  # a child that never answers is one process (killed, it is gone)
        f"#!/bin/sh\nexec sleep {delay_s}\n"
        if delay_s >= 60
        else f"#!/bin/sh\nsleep {delay_s}\n"
        'printf \'{"summary": "1 card(s): Fake", "held_memory": ["GPU 0: 5.0 GiB by pid 1"], '
        '"answered_at": %s}\' "$(date +%s.%N)"\n'
    )
    child.chmod(0o755)
    with monkeypatch.context() as m:  # only this child: the simulator needs the real one
        m.setattr(sys, "executable", str(child))
        return GpuDiscovery()


def _sim_scenario(tmp_path: Path) -> Path:
    corpus = Path(__file__).resolve().parents[2] / "corpora" / "en"
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: late_gpu\n"
        "target: {url: sim}\n"
        "users: {count: 2, ramp_up: 0s, think_time: {min: 0s, max: 0s}}\n"
        "duration: 2s\n"
        "conversation:\n"
        "  ceiling_tokens: 4000\n"
        f"  turn: {{paste: {{corpus: {corpus}, tokens: [100, 200]}}, ask: [Summarise.]}}\n"
        "request: {max_tokens: 20}\n"
        "telemetry: {gpus: 'off'}\n"
    )
    return path


async def test_the_run_starts_before_the_gpu_answers_and_keeps_its_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NVML's start-up never delays the first request: the GPU pre-flight's findings join
    the manifest, and its warning the events, when the child answers."""
    import orjson

    from stress.config.scenario import load_scenario
    from stress.runtime.run import execute

    found = _slow_child(tmp_path, monkeypatch, 6)
    outcome = await execute(
        load_scenario(_sim_scenario(tmp_path)), tmp_path / "out", gpu_discovery=found
    )
    manifest = orjson.loads((outcome.run_dir / "manifest.json").read_bytes())
    gpu = manifest["probe"]["gpu"]
    assert gpu["summary"] == "1 card(s): Fake"
    assert manifest["start_time"] < gpu["answered_at"]  # the run did not wait for it
    warning = "GPU memory held before the run: GPU 0: 5.0 GiB by pid 1"
    assert any(w.startswith(warning) for w in manifest["probe_warnings"])
    events = [orjson.loads(x) for x in (outcome.run_dir / "events.jsonl").read_bytes().splitlines()]
    assert any(e["kind"] == "preflight" and e["message"].startswith(warning) for e in events)


async def test_a_gpu_that_never_answers_is_said_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orjson

    import stress.runtime.background
    import stress.runtime.run
    from stress.config.scenario import load_scenario

    monkeypatch.setattr(stress.runtime.background, "LATE_GPU_WAIT_S", 0.2)
    found = _slow_child(tmp_path, monkeypatch, 60)
    proc = found._proc
    assert proc is not None
    outcome = await stress.runtime.run.execute(
        load_scenario(_sim_scenario(tmp_path)), tmp_path / "out", gpu_discovery=found
    )
    manifest = orjson.loads((outcome.run_dir / "manifest.json").read_bytes())
    assert manifest["probe"]["gpu"] == {
        "summary": "GPU discovery had not answered when the run ended"
    }
    for _ in range(100):  # killed with the run; the waiting thread reaps it
        if proc.poll() is not None:
            break
        await asyncio.sleep(0.05)
    assert proc.returncode is not None


def test_the_child_is_niced_from_its_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where it shares a core with the run's start, the start comes first: the child is
    niced as it is spawned, not after its own imports."""
    import os

    import psutil

    found = _slow_child(tmp_path, monkeypatch, 60)
    try:
        assert found._proc is not None
        assert psutil.Process(found._proc.pid).nice() == min(19, os.nice(0) + gpu_discovery.NICE)
    finally:
        found.discard()
