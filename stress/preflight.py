"""Pre-flight before a long run: what the server says about itself, and the GPUs.

``stress run`` and ``stress probe`` share this: the server probe (kind, version, context,
metrics and cached-token flags), the comparison of the scenario with the server's real
per-request context, and GPU memory still held by another process (a restarted engine
keeps VRAM for a while, field note 13). Nothing here raises for a server-side problem.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from stress.probe import ProbeResult, check_scenario, probe


def gpu_preflight() -> dict[str, Any]:
    """Cards found and memory held on them (blocking: NVML; call from a thread)."""
    try:
        from stress.collectors.gpu import discover_report, held_memory
    except ImportError:  # pragma: no cover - the GPU package is part of the build
        return {"summary": "GPU telemetry not available in this build"}
    try:
        found = discover_report()
    except Exception as e:  # NVML can fail in many ways; a probe never does
        return {"summary": f"GPU discovery failed: {type(e).__name__}: {e}"}
    cards = found.cards
    if not cards:
        note = "; ".join(found.notes) if found.notes else "no GPU found"
        return {"summary": note, "cards": []}
    held = held_memory(cards)
    names = ", ".join(sorted({c.name for c in cards}))
    summary = f"{len(cards)} card(s): {names}"
    if held:
        summary += "; memory held: " + "; ".join(held)
    return {
        "summary": summary,
        "cards": [c.as_dict() for c in cards],
        "held_memory": held,
    }


async def with_gpu_info(result: ProbeResult) -> ProbeResult:
    gpu = await asyncio.to_thread(gpu_preflight)
    return result.model_copy(update={"gpu": gpu})


async def preflight(
    session: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str],
    ceiling_tokens: int,
    max_tokens: int,
) -> tuple[ProbeResult, list[str]]:
    result = await with_gpu_info(await probe(session, url, headers))
    warnings = check_scenario(result, ceiling_tokens, max_tokens) if result.reachable else []
    for held in (result.gpu or {}).get("held_memory", []):
        warnings.append(
            f"GPU memory held before the run: {held} (the server under test, if it runs on "
            "this machine; otherwise a restarted engine that has not released it yet)"
        )
    return result, warnings
