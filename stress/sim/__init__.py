"""The built-in simulator: an engine-like OpenAI-compatible server for demos and tests.

It models a KV pool with a prefix cache, a scheduler with preemption, a speed model with
chunked prefill, optional reasoning, three server dialects and fault injection, in a
scalable simulated time. See docs/simulator.md.
"""

from __future__ import annotations

from stress.sim.config import FaultRule, SimConfig
from stress.sim.server import RunningSim, start_sim

__all__ = ["FaultRule", "RunningSim", "SimConfig", "start_sim"]
