"""The built-in simulator: an engine-like OpenAI-compatible server for demos and tests.

It models a KV pool with a prefix cache, a scheduler with preemption, a speed model with
chunked prefill, optional reasoning, three server dialects and fault injection, in a
scalable simulated time. See docs/simulator.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stress.config.sim import FaultRule, SimConfig
    from stress.sim.server import RunningSim, start_sim

__all__ = ["FaultRule", "RunningSim", "SimConfig", "start_sim"]


def __getattr__(name: str) -> Any:
    # Lazy: `stress --help` finds `stress.sim.cli` without loading aiohttp and pydantic.
    if name in ("FaultRule", "SimConfig"):
        from stress.config import sim as config

        return getattr(config, name)
    if name in ("RunningSim", "start_sim"):
        from stress.sim import server

        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
