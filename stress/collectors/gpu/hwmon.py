"""Intel (xe, i915) and AMD (amdgpu) cards through Linux hwmon and the PCI sysfs.

These cards have no NVML; the kernel exposes what they measure as hwmon files in fixed
units (µW, µJ, m°C, mV, RPM) and the PCI device directory adds busy %, VRAM and the
link. Every path is taken relative to ``root`` so tests run against a fake tree in a temp
directory. Channel numbers differ by driver and kernel, so channels are found by their
``*_label`` files where those exist. xe has no power input at all: its power is the
energy counter's delta between two samples.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from stress.collectors.gpu.backend import BackendUnavailable
from stress.collectors.gpu.identity import normalize_bus_id
from stress.collectors.gpu.model import CardInfo, CardSample, HwEvent

DRIVERS = {"xe": "intel", "i915": "intel", "amdgpu": "amd"}
_GT_S_TO_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
MIB = 1024 * 1024


def read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def read_int(path: Path) -> int | None:
    text = read_text(path)
    if text is None:
        return None
    try:
        return int(text.split()[0], 0)
    except (ValueError, IndexError):
        return None


def link_gen(speed: str | None) -> int | None:
    """``"16.0 GT/s PCIe"`` -> 4."""
    if not speed:
        return None
    try:
        return _GT_S_TO_GEN.get(float(speed.split()[0]))
    except ValueError:
        return None


def pci_bus_id(device_dir: Path) -> str | None:
    """The PCI address of a device directory: ``uevent``'s PCI_SLOT_NAME, else its name."""
    uevent = read_text(device_dir / "uevent") or ""
    for line in uevent.splitlines():
        if line.startswith("PCI_SLOT_NAME="):
            return normalize_bus_id(line.split("=", 1)[1])
    return normalize_bus_id(os.path.basename(os.path.realpath(device_dir)))


def pcie_link(device_dir: Path) -> tuple[int | None, int | None, int | None, int | None]:
    """(gen, gen_max, width, width_max) from the PCI device's link files."""
    return (
        link_gen(read_text(device_dir / "current_link_speed")),
        link_gen(read_text(device_dir / "max_link_speed")),
        read_int(device_dir / "current_link_width"),
        read_int(device_dir / "max_link_width"),
    )


def channels(hwmon: Path, kind: str) -> dict[str, int]:
    """Label -> channel number for ``<kind>N_label`` files (``temp2_label`` = "pkg")."""
    out: dict[str, int] = {}
    for p in sorted(hwmon.glob(f"{kind}*_label")):
        num = p.name[len(kind) : -len("_label")]
        label = read_text(p)
        if num.isdigit() and label:
            out[label.lower()] = int(num)
    return out


@dataclass(slots=True)
class _HwCard:
    key: str
    driver: str
    hwmon: Path
    device: Path
    info: CardInfo
    last_energy: tuple[float, float] | None = None


@dataclass(slots=True)
class HwmonBackend:
    """All xe / i915 / amdgpu cards under ``root`` (``/`` on a real host)."""

    root: Path | str = "/"
    name: str = "hwmon"
    _cards: list[_HwCard] = field(default_factory=list)

    def open(self) -> list[CardInfo]:
        base = Path(self.root) / "sys" / "class" / "hwmon"
        seen: set[str] = set()
        for hw in sorted(base.glob("hwmon*")):
            driver = read_text(hw / "name")
            if driver not in DRIVERS:
                continue  # i915_gtN are per-GT views of a card already counted
            device = hw / "device"
            bus = pci_bus_id(device)
            info = CardInfo(
                vendor=DRIVERS[driver],
                backend=self.name,
                name=self._name(driver, device),
                uuid=None,
                bus_id=bus,
                driver=driver,
            )
            if info.key in seen:
                continue
            seen.add(info.key)
            gen, gen_max, width, width_max = pcie_link(device)
            info.pcie_gen, info.pcie_gen_max = gen, gen_max
            info.pcie_width, info.pcie_width_max = width, width_max
            card = _HwCard(info.key, driver, hw, device, info)
            s = self._sample_card(card, 0.0)
            info.mem_used_mib, info.mem_total_mib = s.mem_used_mib, s.mem_total_mib
            info.power_limit_w = s.power_limit_w
            info.supported = self._items(s)
            self._cards.append(card)
        if not self._cards:
            raise BackendUnavailable("no xe / i915 / amdgpu hwmon device")
        return [c.info for c in self._cards]

    @staticmethod
    def _name(driver: str, device: Path) -> str:
        vendor = "Intel" if DRIVERS[driver] == "intel" else "AMD"
        dev_id = read_text(device / "device")
        return f"{vendor} GPU ({driver} {dev_id})" if dev_id else f"{vendor} GPU ({driver})"

    @staticmethod
    def _items(s: CardSample) -> list[str]:
        items = {
            "power": s.power_w is not None or s.energy_counter_j is not None,
            "power_limit": s.power_limit_w is not None,
            "energy_counter": s.energy_counter_j is not None,
            "temp": s.temp_c is not None,
            "temp_mem": s.temp_mem_c is not None,
            "clocks": s.sm_mhz is not None,
            "util": s.util_gpu is not None,
            "memory": s.mem_used_mib is not None,
            "pcie_link": s.pcie_width is not None,
            "fan": s.fan_rpm is not None,
        }
        return [k for k, ok in items.items() if ok]

    def sample(self, t: float) -> list[CardSample]:
        return [self._sample_card(c, t) for c in self._cards]

    def _sample_card(self, card: _HwCard, t: float) -> CardSample:
        s = CardSample(key=card.key, t=t)
        if card.driver == "amdgpu":
            self._amd(card, s)
        else:
            self._intel(card, s)
        fan = read_int(card.hwmon / "fan1_input")
        s.fan_rpm = float(fan) if fan is not None else None
        s.pcie_gen, _, s.pcie_width, _ = pcie_link(card.device)
        return s

    def _intel(self, card: _HwCard, s: CardSample) -> None:
        hw = card.hwmon
        energy = channels(hw, "energy")
        card_ch = energy.get("card", 1)
        uj = read_int(hw / f"energy{card_ch}_input")
        pkg_ch = energy.get("pkg")
        if pkg_ch is not None and pkg_ch != card_ch:
            pkg_uj = read_int(hw / f"energy{pkg_ch}_input")
            if pkg_uj is not None:
                s.extra["pkg_energy_counter_j"] = pkg_uj / 1e6
        if uj is not None:
            s.energy_counter_j = uj / 1e6
            # xe exposes no power input: power is the counter's slope between samples.
            if card.last_energy is not None and t_ok(card.last_energy[0], s.t):
                dt = s.t - card.last_energy[0]
                de = s.energy_counter_j - card.last_energy[1]
                s.power_w = de / dt if de >= 0 else None
            card.last_energy = (s.t, s.energy_counter_j)
        power = channels(hw, "power")
        limit_uw = read_int(hw / f"power{power.get('card', 1)}_max")
        if not limit_uw:
            limit_uw = read_int(hw / f"power{power.get('pkg', 2)}_max")
        s.power_limit_w = limit_uw / 1e6 if limit_uw else None
        for name in ("power1_crit", "power1_cap", "power1_rated_max"):
            v = read_int(hw / name)
            if v:
                s.extra[f"{name}_w"] = v / 1e6
        temps = channels(hw, "temp")
        for label, ch in temps.items():
            mc = read_int(hw / f"temp{ch}_input")
            if mc is None:
                continue
            if label == "pkg":
                s.temp_c = mc / 1000.0
            elif label in ("vram", "mem"):
                s.temp_mem_c = mc / 1000.0
            else:
                s.extra[f"temp_{label}_c"] = mc / 1000.0
        if not temps:
            mc = read_int(hw / "temp1_input")
            s.temp_c = mc / 1000.0 if mc is not None else None

    def _amd(self, card: _HwCard, s: CardSample) -> None:
        hw, dev = card.hwmon, card.device
        uw = read_int(hw / "power1_input")
        if uw is None:
            uw = read_int(hw / "power1_average")
        s.power_w = uw / 1e6 if uw is not None else None
        cap = read_int(hw / "power1_cap")
        s.power_limit_w = cap / 1e6 if cap else None
        temps = channels(hw, "temp")
        by_label = temps or {"edge": 1}
        for label, ch in by_label.items():
            mc = read_int(hw / f"temp{ch}_input")
            if mc is None:
                continue
            if label == "edge":
                s.temp_c = mc / 1000.0
            elif label == "mem":
                s.temp_mem_c = mc / 1000.0
            else:
                s.extra[f"temp_{label}_c"] = mc / 1000.0
        freqs = channels(hw, "freq")
        sclk = read_int(hw / f"freq{freqs.get('sclk', 1)}_input")
        mclk = read_int(hw / f"freq{freqs.get('mclk', 2)}_input")
        s.sm_mhz = round(sclk / 1e6) if sclk is not None else None
        s.mem_mhz = round(mclk / 1e6) if mclk is not None else None
        busy = read_int(dev / "gpu_busy_percent")
        s.util_gpu = float(busy) if busy is not None else None
        mbusy = read_int(dev / "mem_busy_percent")
        s.util_mem = float(mbusy) if mbusy is not None else None
        used = read_int(dev / "mem_info_vram_used")
        total = read_int(dev / "mem_info_vram_total")
        s.mem_used_mib = used / MIB if used is not None else None
        s.mem_total_mib = total / MIB if total is not None else None

    def start_events(self) -> None:
        return None

    def drain_events(self) -> list[HwEvent]:
        return []

    def unsupported(self) -> dict[str, list[str]]:
        return {}

    def close(self) -> None:
        self._cards.clear()


def t_ok(t0: float, t1: float) -> bool:
    return t1 - t0 > 1e-3
