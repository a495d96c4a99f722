"""PCIe Advanced Error Reporting counters for a card and the port above it.

A link that corrects errors all hour still "works" and hides as poor scaling; a fatal
one takes the card off the bus. The kernel counts both in sysfs (``aer_dev_*``, kernel
4.19+, only where AER is enabled), sometimes only at the link partner, so we read the
card's function and its upstream port. Absent files mean "not available", not zero.
"""

from __future__ import annotations

import os
from pathlib import Path

from stress.collectors.gpu.identity import normalize_bus_id

_FILES = {
    "aer_dev_correctable": ("cor", "TOTAL_ERR_COR"),
    "aer_dev_nonfatal": ("nonfatal", "TOTAL_ERR_NONFATAL"),
    "aer_dev_fatal": ("fatal", "TOTAL_ERR_FATAL"),
}
_ROOTPORT = {
    "aer_rootport_total_err_cor": "cor",
    "aer_rootport_total_err_nonfatal": "nonfatal",
    "aer_rootport_total_err_fatal": "fatal",
}


def parse_aer(text: str) -> dict[str, int]:
    """``"RxErr 0\\nBadTLP 2\\n...\\nTOTAL_ERR_COR 2"`` -> ``{"RxErr": 0, ...}``."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        try:
            out[parts[0]] = int(parts[1])
        except ValueError:
            continue
    return out


def device_dir(root: Path | str, bus_id: str) -> Path:
    return Path(root) / "sys" / "bus" / "pci" / "devices" / bus_id


def upstream_port(root: Path | str, bus_id: str) -> str | None:
    """The bus id of the bridge above ``bus_id`` (its parent in the resolved sysfs path)."""
    path = device_dir(root, bus_id)
    try:
        real = os.path.realpath(path)
    except OSError:
        return None
    parent = os.path.basename(os.path.dirname(real))
    up = normalize_bus_id(parent)
    return up if up and up != bus_id else None


def read_counts(dev: Path) -> dict[str, int]:
    """``{"cor": n, "nonfatal": n, "fatal": n}`` for whichever files exist."""
    out: dict[str, int] = {}
    for fname, (short, total_key) in _FILES.items():
        try:
            text = (dev / fname).read_text()
        except (OSError, UnicodeDecodeError):
            continue
        parsed = parse_aer(text)
        if total_key in parsed:
            out[short] = parsed[total_key]
        elif parsed:
            out[short] = sum(parsed.values())
    for fname, short in _ROOTPORT.items():
        try:
            value = int((dev / fname).read_text().strip())
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        out[f"rootport_{short}"] = value
    return out


class AerReader:
    """Reads AER counters of one card and its upstream port as flat error counters."""

    def __init__(self, root: Path | str, bus_id: str) -> None:
        self.root = root
        self.bus_id = bus_id
        self.upstream = upstream_port(root, bus_id)

    def counters(self) -> dict[str, int]:
        out = {f"aer_{k}": v for k, v in read_counts(device_dir(self.root, self.bus_id)).items()}
        if self.upstream:
            up = read_counts(device_dir(self.root, self.upstream))
            out.update({f"aer_upstream_{k}": v for k, v in up.items()})
        return out

    def available(self) -> bool:
        return bool(self.counters())
