"""Pure text formatting for the TUI: numbers, durations, sparklines, GPU rows.

Kept free of Textual so that it is cheap to test and so that every cell the UI shows is
a plain function of the snapshot. A missing value is always shown as ``-`` (a collector
that does not report a field, or a user who has not finished a turn yet).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from stress.collectors.gpu.model import short_bus

DASH = "-"
BLOCKS = "▁▂▃▄▅▆▇█"


def clock(seconds: float) -> str:
    """Elapsed time as a steady-width clock: ``4:05``, ``1:02:03``."""
    s = max(0, int(seconds))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def secs(value: float | None) -> str:
    """A latency: ``0.42s``, ``12.3s``, ``95s``, ``4m30s``."""
    if value is None:
        return DASH
    if value < 10:
        return f"{value:.2f}s"
    if value < 60:
        return f"{value:.1f}s"
    if value < 120:
        return f"{value:.0f}s"
    m, s = divmod(round(value), 60)
    return f"{m}m{s:02d}s"


def age(seconds: float) -> str:
    """How long something has lasted, in at most 4 characters: ``0s``, ``23s``, ``999s``,
    ``17m``, ``1.7h``, ``26h``. Whole seconds, so a cell changes at most once a second."""
    s = max(0.0, seconds)
    if s < 1000:
        return f"{int(s)}s"
    if s < 6000:
        return f"{int(s // 60)}m"
    if s < 36_000:
        return f"{s / 3600:.1f}h"
    return f"{int(s // 3600)}h"


def tokens(value: float | None) -> str:
    """A token count: ``950``, ``12.3k``, ``431k``, ``1.2M``."""
    if value is None:
        return DASH
    v = float(value)
    if v < 1000:
        return f"{v:.0f}"
    if v < 10_000:
        return f"{v / 1000:.1f}k"
    if v < 1_000_000:
        return f"{v / 1000:.0f}k"
    return f"{v / 1e6:.1f}M"


def rate(value: float | None) -> str:
    """Tokens per second: ``7.4``, ``62``, ``1.2k``."""
    if value is None:
        return DASH
    if value < 10:
        return f"{value:.1f}"
    if value < 1000:
        return f"{value:.0f}"
    return f"{value / 1000:.1f}k"


def pct(value: float | None, *, ratio: bool = True) -> str:
    """A percentage; ``ratio`` says the value is 0..1 rather than 0..100."""
    if value is None:
        return DASH
    return f"{100 * value if ratio else value:.0f}%"


def count(value: int | float | None) -> str:
    return DASH if value is None else f"{value:,.0f}"


def spark(values: Sequence[float], width: int) -> str:
    """The last ``width`` values as block characters, scaled from 0 to the maximum."""
    if width <= 0 or not values:
        return ""
    tail = list(values)[-width:]
    top = max(tail)
    if top <= 0:
        return BLOCKS[0] * len(tail)
    last = len(BLOCKS) - 1
    return "".join(BLOCKS[min(last, max(0, round(v / top * last)))] for v in tail)


def num(d: Mapping[str, Any], key: str) -> float | None:
    """A number from a collector's dict, or None when absent or not a number."""
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def gpu_cards(live: object) -> list[dict[str, Any]]:
    """The per-card dicts of the GPU collector's live view, whatever its outer shape."""
    cards: object = live.get("cards") if isinstance(live, Mapping) else live
    if not isinstance(cards, list):
        return []
    return [c for c in cards if isinstance(c, dict)]


def card_cells(card: Mapping[str, Any], index: int) -> tuple[str, ...]:
    """One GPU row: short PCI address (as ``card_label`` names it), name, util,
    power/limit, temp, SM clock, memory, throttle, energy."""
    util, power, limit = num(card, "util"), num(card, "power_w"), num(card, "power_limit_w")
    if power is None:
        power_s = DASH
    elif limit:
        power_s = f"{power:.0f}/{limit:.0f}W"
    else:
        power_s = f"{power:.0f}W"
    temp, sm, mem = num(card, "temp_c"), num(card, "sm_mhz"), num(card, "mem_used_mib")
    energy = num(card, "energy_j")
    throttle = card.get("throttle")
    if isinstance(throttle, list | tuple):
        throttle_s = ",".join(str(t) for t in throttle) or "none"
    elif isinstance(throttle, str):
        throttle_s = throttle or "none"
    else:
        throttle_s = DASH
    name = card.get("name")
    return (
        short_bus(card.get("bus_id")) or str(index),  # the address, never an index alone
        str(name) if name else DASH,
        pct(util, ratio=False),
        power_s,
        DASH if temp is None else f"{temp:.0f}°C",
        DASH if sm is None else f"{sm:.0f}",
        DASH if mem is None else f"{mem / 1024:.1f}G",
        throttle_s,
        energy_s(energy),
        "IDLE" if card.get("flagged") else "",
    )


def energy_s(joules: float | None) -> str:
    """Energy so far: ``850J``, ``12kJ``, ``1.3kWh``."""
    if joules is None:
        return DASH
    if joules < 1000:
        return f"{joules:.0f}J"
    if joules < 3.6e6:
        return f"{joules / 1000:.0f}kJ"
    return f"{joules / 3.6e6:.1f}kWh"


def total_power(cards: Sequence[Mapping[str, Any]]) -> float | None:
    values = [p for p in (num(c, "power_w") for c in cards) if p is not None]
    return sum(values) if values else None
