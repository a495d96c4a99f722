"""Number formatting shared by every table, so a figure reads the same everywhere."""

from __future__ import annotations

from typing import Protocol


class Described(Protocol):
    """A distribution's summary (``stress.analysis.stats.Describe``), as far as it is shown."""

    @property
    def n(self) -> int: ...
    @property
    def mean(self) -> float | None: ...
    @property
    def sd(self) -> float | None: ...


def num(v: float | int | None, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, int):
        return f"{v:,}"
    if v != v:  # NaN
        return "-"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"


def pct(v: float | None) -> str:
    return "-" if v is None else f"{100.0 * v:.1f}%"


def mean_sd(d: Described, digits: int = 3) -> str:
    if d.n == 0 or d.mean is None:
        return "-"
    return f"{num(d.mean, digits)} ± {num(d.sd, digits)}"


def tokens(v: float | int | None) -> str:
    return "-" if v is None else f"{round(v):,}"


def times(factor: float) -> str:
    """A factor as 'x1.14', 'x19.1' or 'x3,970' (never in e-notation)."""
    if factor != factor:  # NaN
        return "x-"
    if factor == float("inf"):
        return "x∞"
    return f"x{factor:,.0f}" if abs(factor) >= 100 else f"x{factor:.3g}"
