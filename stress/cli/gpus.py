"""``stress gpus``: list every card this host has, by identity, with what it can report.

Run it before a soak to see which card is which (UUID and PCI bus id, never an index),
whether a link trained narrower than it should, which telemetry items each card answers,
and whether some process still holds GPU memory. With no GPU it says so in one line and
exits 0: a CPU-only host is a valid place to run ``stress``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from stress.collectors.gpu.discover import discover_report, held_memory
from stress.collectors.gpu.model import CardInfo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the cards as JSON")
    parser.add_argument(
        "--sysfs-root", default="/", help="root of /sys to read hwmon and AER from (tests)"
    )


def _num(v: float | None, unit: str, fmt: str = ",.0f") -> str:
    return "n/a" if v is None else f"{v:{fmt}} {unit}"


def _link(c: CardInfo) -> str:
    if c.pcie_width is None and c.pcie_gen is None:
        return "PCIe n/a"
    text = f"PCIe gen {c.pcie_gen or '?'} x{c.pcie_width or '?'}"
    text += f" (max gen {c.pcie_gen_max or '?'} x{c.pcie_width_max or '?'})"
    if c.link_degraded():
        text += "  <- link trained narrower than the card allows"
    return text


def render(cards: list[CardInfo]) -> list[str]:
    drivers = sorted({f"{c.driver}" for c in cards if c.driver})
    lines = [f"{len(cards)} GPU(s)" + (f", driver {', '.join(drivers)}" if drivers else "")]
    for c in cards:
        idx = f"[{c.index}] " if c.index is not None else ""
        lines.append(f"{idx}{c.name} ({c.vendor})  {c.uuid or '-'}  bus {c.bus_id or '?'}")
        mem = "memory n/a"
        if c.mem_total_mib is not None:
            used = f"{c.mem_used_mib:,.0f}" if c.mem_used_mib is not None else "?"
            mem = f"memory {used} / {c.mem_total_mib:,.0f} MiB"
        lines.append(f"    {mem}   power limit {_num(c.power_limit_w, 'W')}   {_link(c)}")
        lines.append(f"    supports: {', '.join(c.supported) or 'nothing'}")
        if c.unsupported:
            lines.append(f"    not supported: {', '.join(c.unsupported)}")
    held = held_memory(cards)
    for line in held:
        lines.append(f"memory held: {line}")
    return lines


def main(args: argparse.Namespace) -> int:
    try:
        found = discover_report(sysfs_root=getattr(args, "sysfs_root", "/"))
    except Exception as exc:  # discovery never raises, but a CLI never shows a traceback
        print(f"GPU discovery failed: {exc}")
        return 0
    if getattr(args, "json", False):
        doc: dict[str, Any] = {
            "cards": [c.as_dict() for c in found.cards],
            "notes": found.notes,
            "memory_held": held_memory(found.cards),
        }
        print(json.dumps(doc, indent=2))
        return 0
    if not found.cards:
        why = "; ".join(found.notes) or "nothing found"
        print(f"No GPU found ({why}).")
        return 0
    print("\n".join(render(found.cards)))
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(prog="stress gpus", description=__doc__)
    add_arguments(p)
    sys.exit(main(p.parse_args()))
