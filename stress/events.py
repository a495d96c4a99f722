"""Run events: the things that happen during a run besides finished requests.

Warnings, errors worth a line in the log, server restarts, hangs, hardware errors. Each is
appended to ``events.jsonl`` in the run directory and shown live (headless lines or TUI).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["info", "warning", "error"]


@dataclass(slots=True)
class RunEvent:
    t: float
    """Seconds since the run started (perf_counter based)."""
    kind: str
    """Short machine-readable name, e.g. ``empty_reply``, ``restart``, ``xid``, ``stall``."""
    message: str
    """One human-readable line. Never contains a secret (the recorder redacts anyway)."""
    severity: Severity = "info"
    source: str = "engine"
    """Who noticed: engine, client, server, gpu."""
    user: int | None = None
    data: dict[str, Any] = field(default_factory=dict)
