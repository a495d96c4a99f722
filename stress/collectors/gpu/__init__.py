"""GPU telemetry: NVML and hwmon per card, energy per token, throttling, Xid, link health.

Public surface (everything else is private to the package):

- ``GpuCollector``: the run-time sampler (``stress run``), writes ``gpu.jsonl``.
- ``discover`` / ``discover_report`` / ``held_memory``: ``stress gpus`` and the probe.
- ``CardInfo``, ``CardSample``: the value objects they return.
- ``normalize_bus_id``, ``resolve_selection``: identity helpers, never by index.
"""

from __future__ import annotations

from stress.collectors.gpu.backend import Backend, BackendUnavailable
from stress.collectors.gpu.collector import GpuCollector
from stress.collectors.gpu.discover import Discovery, discover, discover_report, held_memory
from stress.collectors.gpu.hwmon import HwmonBackend
from stress.collectors.gpu.identity import Selection, normalize_bus_id, resolve_selection
from stress.collectors.gpu.model import CardInfo, CardSample, HwEvent, ProcessInfo
from stress.collectors.gpu.nvml import NvmlBackend

__all__ = [
    "Backend",
    "BackendUnavailable",
    "CardInfo",
    "CardSample",
    "Discovery",
    "GpuCollector",
    "HwEvent",
    "HwmonBackend",
    "NvmlBackend",
    "ProcessInfo",
    "Selection",
    "discover",
    "discover_report",
    "held_memory",
    "normalize_bus_id",
    "resolve_selection",
]
