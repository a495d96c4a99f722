"""The GPU half of the pre-flight, run as a child process of ``stress run`` and ``stress probe``
(``python -m stress.runtime.gpu_preflight``: one JSON object on stdout).

Apart, so that NVML's initialisation (a quarter of a second and 34 MiB on an H200 host)
never lands in the load generator; light (the GPU discovery and the standard library
only; niced by its parent as it starts), so that it does not slow the parent's own start
where both share a core.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def gpu_preflight() -> dict[str, Any]:
    """Cards found and memory held on them (blocking: NVML)."""
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


if __name__ == "__main__":  # niced by its parent (stress.runtime.gpu_discovery) from the start
    sys.stdout.write(json.dumps(gpu_preflight()))
