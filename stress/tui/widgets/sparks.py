"""Sparklines over the last minutes: TTFT, aggregate output tok/s, total GPU power.

A trend an operator can read at a glance: TTFT climbing as conversations grow, output
falling when preemptions start, power saw-toothing at the cap. Text blocks, not a chart
widget: three lines, redrawn only when the numbers change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.text import Text
from textual.widget import Widget

from stress.tui import format as f

LABEL = 10
VALUE = 8
Series = tuple[str, tuple[float, ...], Callable[[float | None], str], str]


def sparks_text(series: Sequence[Series], width: int) -> Text:
    room = max(0, width - LABEL - VALUE - 2)
    t = Text()
    for i, (label, values, fmt, style) in enumerate(series):
        if i:
            t.append("\n")
        t.append(f"{label:<{LABEL}}")
        t.append(f" {f.spark(values, room):<{room}} ", style=style)
        t.append(f"{fmt(values[-1] if values else None):>{VALUE}}")
    return t


def watts(value: float | None) -> str:
    return f.DASH if value is None else f"{value:.0f}W"


class Sparks(Widget):
    def __init__(self) -> None:
        super().__init__(id="sparks")
        self._series: tuple[Series, ...] = ()
        self._key: tuple[tuple[float, ...], ...] = ()
        self.border_title = "trends"

    def show(
        self,
        ttft: tuple[float, ...],
        out_tok_s: tuple[float, ...],
        power_w: tuple[float, ...],
    ) -> None:
        key = (ttft, out_tok_s, power_w)
        if key == self._key:
            return
        self._key = key
        self._series = (
            ("TTFT", ttft, f.secs, "cyan"),
            ("out tok/s", out_tok_s, f.rate, "green"),
            ("GPU power", power_w, watts, "yellow"),
        )
        self.refresh()

    def render(self) -> Text:
        return sparks_text(self._series, self.size.width)
