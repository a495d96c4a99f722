"""One row per GPU: is each card working, at its power cap, hot, throttled, or idle?

Field note 10: on a box with two different GPUs a script read the idle one. Every card
the collector sees gets a row keyed by its identity, and a card idle while the others work
is flagged in red. Values the collector does not report show as ``-``. The built-in
simulator's simulated cards are labelled so: the panel's title says "simulated", the bus
column shows ``sim:N`` and the name keeps its "(sim)".
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from stress.tui import format as f

COLUMNS = (
    ("gpu", "bus"),
    ("name", "name"),
    ("util", "util"),
    ("power", "power"),
    ("temp", "temp"),
    ("sm", "SM MHz"),
    ("mem", "mem"),
    ("throttle", "throttle"),
    ("energy", "energy"),
    ("flag", ""),
)
NAME_WIDTH = 18
CARD_WIDTHS = {"gpu": 7, "name": 12, "util": 4, "power": 9, "temp": 5, "mem": 6, "throttle": 12}
CARD_WIDTHS["energy"] = 7
CARD_WIDTHS["flag"] = 4


def short_name(name: str) -> str:
    """``NVIDIA GeForce RTX 3090`` -> ``RTX 3090``: the vendor is rarely the news."""
    for prefix in ("NVIDIA ", "GeForce ", "Intel(R) ", "AMD ", "Simulated "):
        name = name.removeprefix(prefix)
    return name[:NAME_WIDTH]


def card_key(card: dict[str, Any], index: int) -> str:
    return str(card.get("key") or card.get("bus_id") or index)


def styled(column: str, value: str) -> str | Text:
    if column == "flag" and value:
        return Text(value, style="bold white on red")
    if column == "throttle" and value not in ("none", f.DASH):
        return Text(value, style="yellow")
    if column in ("name", "throttle", "gpu"):
        return value
    return Text(value, justify="right")


class CardsTable(DataTable[str | Text]):
    def __init__(self) -> None:
        super().__init__(id="cards", cursor_type="none", show_cursor=False)
        self._shown: dict[str, tuple[str, ...]] = {}

    def on_mount(self) -> None:
        for key, label in COLUMNS:
            self.add_column(label, key=key, width=max(len(label), CARD_WIDTHS.get(key, 0)))
        self.border_title = "GPUs"

    def show(self, cards: list[dict[str, Any]]) -> None:
        simulated = any(c.get("simulated") is True for c in cards)
        title = "GPUs (simulated)" if simulated else "GPUs"
        if self.border_title != title:
            self.border_title = title
        seen = set()
        for i, card in enumerate(cards):
            key = card_key(card, i)
            seen.add(key)
            cells = f.card_cells(card, i)
            cells = (cells[0], short_name(cells[1]), *cells[2:])
            old = self._shown.get(key)
            if old is None:
                self.add_row(
                    *(styled(k, v) for (k, _), v in zip(COLUMNS, cells, strict=True)), key=key
                )
            elif old != cells:
                for (col, _), new, was in zip(COLUMNS, cells, old, strict=True):
                    if new != was:
                        self.update_cell(key, col, styled(col, new), update_width=False)
            self._shown[key] = cells
        for gone in set(self._shown) - seen:
            self.remove_row(gone)
            del self._shown[gone]
