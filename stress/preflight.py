"""Pre-flight before a long run: what the server says about itself, and the GPUs.

``stress run`` and ``stress probe`` share this: the server probe (kind, version, context,
metrics and cached-token flags), the comparison of the scenario with the server's real
per-request context, and GPU memory still held by another process (a restarted engine
keeps VRAM for a while, field note 13). Nothing here raises for a server-side problem.

The GPU part runs in a child process (``python -m stress.gpu_preflight``) started at once and
awaited when needed: NVML's initialisation took a quarter of a second and 34 MiB of the
load generator's memory on an H200 host, which a run with ``gpus: off`` must not pay and
one with GPU telemetry pays in its collector only.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import aiohttp
import orjson

from stress.probe import ProbeResult, check_scenario, probe

GPU_PREFLIGHT_TIMEOUT_S = 60.0
"""An NVML that does not answer in this long is reported, not waited for."""


async def gpu_info() -> dict[str, Any]:
    """``stress.gpu_preflight`` in a child process; a failure or a hang is a summary line."""
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "stress.gpu_preflight",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as e:
        return {"summary": f"GPU discovery could not start: {e}"}
    try:
        out, err = await asyncio.wait_for(proc.communicate(), GPU_PREFLIGHT_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return {"summary": f"GPU discovery did not answer within {GPU_PREFLIGHT_TIMEOUT_S:g} s"}
    except asyncio.CancelledError:  # the run ended before it needed the answer
        if proc.returncode is None:
            proc.kill()
        raise
    try:
        found = orjson.loads(out) if proc.returncode == 0 else None
    except orjson.JSONDecodeError:
        found = None
    if not isinstance(found, dict):
        last = (err.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        return {"summary": f"GPU discovery failed (exit {proc.returncode}): {last[:200]}"}
    return found


async def with_gpu_info(
    result: ProbeResult, gpu: asyncio.Future[dict[str, Any]] | None = None
) -> ProbeResult:
    """The probe with the GPU pre-flight (``gpu``: one already started)."""
    found = await (gpu if gpu is not None else gpu_info())
    return result.model_copy(update={"gpu": found})


async def preflight(
    session: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str],
    ceiling_tokens: int,
    max_tokens: int,
    gpu: asyncio.Future[dict[str, Any]] | None = None,
) -> tuple[ProbeResult, list[str]]:
    result = await with_gpu_info(await probe(session, url, headers), gpu)
    warnings = check_scenario(result, ceiling_tokens, max_tokens) if result.reachable else []
    for held in (result.gpu or {}).get("held_memory", []):
        warnings.append(
            f"GPU memory held before the run: {held} (the server under test, if it runs on "
            "this machine; otherwise a restarted engine that has not released it yet)"
        )
    return result, warnings
