"""Plain value objects shared by the GPU backends, the collector and ``stress gpus``.

Backends (NVML, hwmon) speak different units and support different calls; everything they
return is converted here to one vocabulary (W, J, °C, MHz, MiB, KB/s) so that the
collector, the summary and the CLI never care which vendor a card came from. A value a card
does not report is ``None``, never zero: zero watts and "no power sensor" are different.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class ProcessInfo:
    """A process holding GPU memory (from ``nvmlDeviceGetComputeRunningProcesses``)."""

    pid: int
    used_mib: float | None


@dataclass(slots=True)
class CardInfo:
    """What ``stress gpus`` shows per card and what the collector keys its state on.

    ``key`` is the UUID where the card has one (NVIDIA) and ``pci:<bus id>`` otherwise, so
    that cards are matched by identity and never by an enumeration index.
    """

    vendor: str
    backend: str
    name: str
    uuid: str | None
    bus_id: str | None
    index: int | None = None
    """NVML index (PCI bus order), for display only."""
    driver: str | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    power_limit_w: float | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    cuda_cc: tuple[int, int] | None = None
    cuda_cores: int | None = None
    max_sm_mhz: int | None = None
    supported: list[str] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    processes: list[ProcessInfo] | None = None
    """``None`` where the card cannot list them; ``[]`` where it listed none."""
    simulated: bool = False
    """A card of the built-in simulator (``stress.collectors.gpu.simulated``), never real."""

    @property
    def key(self) -> str:
        if self.uuid:
            return self.uuid
        return f"pci:{self.bus_id}" if self.bus_id else f"{self.backend}:{self.name}"

    def link_degraded(self) -> bool:
        """True when the PCIe link trained narrower than the card allows.

        Only the width counts: the generation drops at idle to save power and comes back
        under load, so a low current generation alone means nothing.
        """
        if self.pcie_width is None or self.pcie_width_max is None:
            return False
        return self.pcie_width < self.pcie_width_max

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "vendor": self.vendor,
            "backend": self.backend,
            "name": self.name,
            "uuid": self.uuid,
            "bus_id": self.bus_id,
            "index": self.index,
            "driver": self.driver,
            "mem_used_mib": self.mem_used_mib,
            "mem_total_mib": self.mem_total_mib,
            "power_limit_w": self.power_limit_w,
            "pcie": {
                "gen": self.pcie_gen,
                "gen_max": self.pcie_gen_max,
                "width": self.pcie_width,
                "width_max": self.pcie_width_max,
            },
            "supported": list(self.supported),
            "unsupported": list(self.unsupported),
            "processes": None
            if self.processes is None
            else [{"pid": p.pid, "used_mib": p.used_mib} for p in self.processes],
            **({"simulated": True} if self.simulated else {}),
        }


@dataclass(slots=True)
class CardSample:
    """One reading of one card, already in the common units. ``None`` = not reported."""

    key: str
    t: float = 0.0
    power_w: float | None = None
    power_limit_w: float | None = None
    energy_counter_j: float | None = None
    """The card's cumulative energy counter (since driver load), in joules."""
    energy_counter_wraps_at_j: float | None = None
    temp_c: float | None = None
    temp_mem_c: float | None = None
    sm_mhz: int | None = None
    mem_mhz: int | None = None
    util_gpu: float | None = None
    util_mem: float | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    throttle_mask: int | None = None
    pcie_tx_kbs: int | None = None
    pcie_rx_kbs: int | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    fan_pct: float | None = None
    fan_rpm: float | None = None
    extra: dict[str, float] = field(default_factory=dict)
    """Vendor-specific readings worth keeping (package energy, junction temp...)."""
    error_counters: dict[str, int] = field(default_factory=dict)
    """Monotonic hardware-error counters; any increase during the run is a run event."""


@dataclass(slots=True)
class HwEvent:
    """A hardware event seen outside the sampling (an NVML Xid, a lost GPU)."""

    key: str
    kind: str
    """``xid``, ``ecc_dbe``, ``gpu_unavailable``, ``gpu_lost``..."""
    code: int
    message: str


def short_bus(bus_id: object) -> str:
    """'00000000:18:00.0' -> '18:00.0': the part of a PCI address that tells cards apart."""
    bus = str(bus_id or "")
    return (bus.split(":", 1)[1] if bus.count(":") >= 2 else bus).lower()


def card_label(name: object, bus_id: object) -> str:
    """How a GPU is named everywhere (report, fingerprint; the live view shows the same
    two parts in its own columns): its model and its short PCI address, which tells two
    cards of one model apart where an index would not (nvidia-smi and CUDA number cards
    differently), e.g. 'NVIDIA H200 [18:00.0]'."""
    short = short_bus(bus_id)
    label = str(name or "GPU")
    return f"{label} [{short}]" if short else label
