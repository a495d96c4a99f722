"""Find the cards once, for ``stress gpus`` and for the pre-flight probe.

Blocking (it opens NVML and reads sysfs); the probe calls it from a thread. Besides the
identity and limits it reports who holds GPU memory, because a restarted engine keeps its
VRAM for a while and the next run then fails with "out of memory" on a setting that
worked a minute ago (field notes, trap 13).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from stress.collectors.gpu.backend import Backend
from stress.collectors.gpu.collector import default_backends, open_backends
from stress.collectors.gpu.model import CardInfo


@dataclass(slots=True)
class Discovery:
    cards: list[CardInfo] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Why a backend found nothing (no driver, no hwmon...), one line each."""


def discover_report(
    backends: list[Backend] | None = None, sysfs_root: Path | str = "/"
) -> Discovery:
    """Open every backend, read each card once, close again. Never raises."""
    chosen = backends if backends is not None else default_backends(sysfs_root)
    try:
        opened = open_backends(chosen, sysfs_root, events=False)
    except Exception as exc:
        return Discovery(notes=[f"GPU discovery failed: {type(exc).__name__}: {exc}"])
    for b in opened.backends:
        try:
            b.close()
        except Exception as exc:
            opened.notes.append(f"{b.name}: close failed: {exc}")
    return Discovery(opened.cards, opened.notes)


def discover(backends: list[Backend] | None = None, sysfs_root: Path | str = "/") -> list[CardInfo]:
    """Every card found, NVIDIA first; ``[]`` when there is none (never raises)."""
    return discover_report(backends, sysfs_root).cards


def held_memory(cards: list[CardInfo], min_mib: float = 1024.0) -> list[str]:
    """One line per card whose memory is held before the run starts (for the probe).

    Lists the processes where NVML can see them; in a container the holder may live in
    another PID namespace, so a card with memory used and no listed process is reported
    too.
    """
    lines: list[str] = []
    for c in cards:
        label = f"{c.name} [{c.bus_id or c.key}]"
        procs = c.processes or []
        if procs:
            held = sum(p.used_mib or 0.0 for p in procs)
            who = ", ".join(
                f"pid {p.pid}" + (f" {p.used_mib:,.0f} MiB" if p.used_mib is not None else "")
                for p in procs
            )
            lines.append(f"{label}: {len(procs)} process(es) hold {held:,.0f} MiB ({who})")
        elif c.mem_used_mib is not None and c.mem_used_mib >= min_mib:
            total = f" of {c.mem_total_mib:,.0f}" if c.mem_total_mib else ""
            lines.append(
                f"{label}: {c.mem_used_mib:,.0f}{total} MiB in use and no process listed "
                "(another container, or an engine that just stopped, may still hold it)"
            )
    return lines
