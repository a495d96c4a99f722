"""Pre-flight before a long run: what the server says about itself, and the GPUs.

``stress run`` and ``stress probe`` share this: the server probe (kind, version, context,
metrics and cached-token flags), the comparison of the scenario with the server's real
per-request context, and GPU memory still held by another process (a restarted engine
keeps VRAM for a while, field note 13). Nothing here raises for a server-side problem.

The GPU part runs in a child process (``stress.runtime.gpu_discovery``) started at once and
awaited when needed: NVML's initialisation took a quarter of a second and 34 MiB of the
load generator's memory on an H200 host, which a run with ``gpus: off`` must not pay and
one with GPU telemetry pays in its collector only.
"""

from __future__ import annotations

import asyncio
from typing import Any

from stress.collectors.probe import ProbeResult, check_scenario, probe
from stress.net.fetch import Fetcher
from stress.runtime.gpu_discovery import GpuDiscovery


async def gpu_info() -> dict[str, Any]:
    """The GPU pre-flight, started now."""
    return await GpuDiscovery().result()


async def with_gpu_info(
    result: ProbeResult, gpu: asyncio.Future[dict[str, Any]] | None = None
) -> ProbeResult:
    """The probe with the GPU pre-flight (``gpu``: one already started)."""
    found = await (gpu if gpu is not None else gpu_info())
    return result.model_copy(update={"gpu": found})


async def preflight(
    session: Fetcher,
    url: str,
    headers: dict[str, str],
    ceiling_tokens: int,
    max_tokens: int,
) -> tuple[ProbeResult, list[str]]:
    """The server's half of the pre-flight and its warnings for the scenario. The GPU half
    (:func:`gpu_warnings`) is not waited for here: ``stress run`` adds it when it answers,
    so NVML's start-up never delays the first request."""
    result = await probe(session, url, headers)
    warnings = check_scenario(result, ceiling_tokens, max_tokens) if result.reachable else []
    return result, warnings


def gpu_warnings(found: dict[str, Any]) -> list[str]:
    """GPU memory another process holds before the run (field note 13)."""
    return [
        f"GPU memory held before the run: {held} (the server under test, if it runs on "
        "this machine; otherwise a restarted engine that has not released it yet)"
        for held in found.get("held_memory", [])
    ]
