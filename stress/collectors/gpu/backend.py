"""What the collector needs from a source of GPU readings (NVML, hwmon, a test fake).

Backends are blocking by nature (NVML is a C library; sysfs reads can stall on a wedged
device), so the collector calls every method here from its sampler thread, never from the
event loop. A backend converts its units to those of ``model`` and never raises from
``sample``: a reading it cannot get is ``None``.
"""

from __future__ import annotations

from typing import Protocol

from stress.collectors.gpu.model import CardInfo, CardSample, HwEvent


class BackendUnavailable(Exception):
    """This backend has no card here (no driver, no library, no hwmon). Not an error."""


class Backend(Protocol):
    name: str

    def open(self) -> list[CardInfo]:
        """Find the cards; raise ``BackendUnavailable`` when there are none."""
        ...

    def sample(self, t: float) -> list[CardSample]:
        """One reading of every card opened, stamped ``t``."""
        ...

    def start_events(self) -> None:
        """Start watching asynchronous hardware events (Xid), if the backend has any."""
        ...

    def drain_events(self) -> list[HwEvent]:
        """Events seen since the last call."""
        ...

    def unsupported(self) -> dict[str, list[str]]:
        """Card key -> calls found unsupported (detected once, then skipped)."""
        ...

    def close(self) -> None: ...
