"""Clock-event (throttle) reasons: a bitmask in, names out, and time spent in each.

Consumer cards report no voltages and few temperatures; the throttle-reason mask is often
the only way to see a card fighting its power cap (the saw-tooth of boost, cap, throttle)
or an external power brake. Bits from NVML's ``nvmlClocksEventReason*`` constants.
"""

from __future__ import annotations

#: Bit -> name, in the order we print them. Idle, application clocks and display clock
#: settings are states rather than throttling, but they are decoded so the mask is whole.
REASONS: tuple[tuple[int, str], ...] = (
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x80, "hw_power_brake"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x10, "sync_boost"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks"),
    (0x100, "display_clocks"),
)

#: The reasons that mean "the card wanted to go faster and was held back".
THROTTLING = frozenset(
    {"sw_power_cap", "hw_slowdown", "hw_power_brake", "sw_thermal", "hw_thermal", "board_limit"}
)


def decode(mask: int | None) -> list[str]:
    """Names of the bits set in ``mask``; unknown bits come out as ``bit_0x...``."""
    if not mask:
        return []
    names = [name for bit, name in REASONS if mask & bit]
    known = 0
    for bit, _ in REASONS:
        known |= bit
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append(f"bit_{bit:#x}")
            rest &= ~bit
        bit <<= 1
    return names
