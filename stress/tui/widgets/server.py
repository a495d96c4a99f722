"""The server's side of the story: KV pool, queue, prefix-cache hit rate, preemptions.

Field notes: a 40 % hit rate came from a working set (the users' live conversations) that
nearly filled the KV pool. Showing the working set against the pool next to the hit rate
makes that cause visible while the run is still going.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.text import Text
from textual.widget import Widget

from stress.tui import format as f

BAR = 10


def bar(ratio: float | None, width: int = BAR) -> Text:
    if ratio is None:
        return Text("░" * width, style="dim")
    filled = max(0, min(width, round(ratio * width)))
    style = "red" if ratio >= 0.9 else "yellow" if ratio >= 0.7 else "green"
    t = Text("█" * filled, style=style)
    t.append("░" * (width - filled), style="dim")
    return t


def server_text(live: Mapping[str, Any] | None, working_set: int, compact: bool = False) -> Text:
    if not live:
        t = Text("no server metrics", style="dim")
        t.append(f" · working set {f.tokens(working_set)} tok")
        return t
    kv = f.num(live, "kv_usage")
    pool = f.num(live, "kv_pool_tokens")
    ws_ratio = working_set / pool if pool else None
    hit_w, hit_r = f.num(live, "hit_rate_window"), f.num(live, "hit_rate_run")
    pre, pre_min = f.num(live, "preemptions"), f.num(live, "preemptions_per_min")
    running, waiting = f.num(live, "running"), f.num(live, "waiting")
    t = Text()
    t.append("KV ")
    t.append_text(bar(kv, 6 if compact else BAR))
    t.append(f" {f.pct(kv):>4}")
    t.append(f" · run {f.count(running)} wait ")
    t.append(f.count(waiting), style="yellow" if waiting else "")
    if not live.get("up", True):
        t.append(" · DOWN", style="bold red")
    t.append("\n" if not compact else " · ")
    t.append(f"hit {f.pct(hit_w)} (window) {f.pct(hit_r)} (run)")
    t.append("\n")
    t.append("working set ")
    if live.get("dialect") == "llamacpp":  # slots are separate contexts: no pool to fill
        t.append(f"{f.tokens(working_set)} tok (per-slot contexts)")
    else:
        t.append(f"{f.tokens(working_set)}/{f.tokens(pool)}")
    if ws_ratio is not None:
        t.append(f" ({f.pct(ws_ratio)})", style="red" if ws_ratio >= 0.9 else "")
    t.append("\n" if not compact else " · ")
    t.append("preempt ")
    t.append(f.count(pre), style="bold yellow" if pre else "")
    if pre_min:
        t.append(f" ({pre_min:.1f}/min)")
    if not compact:
        spec = f.num(live, "spec_accept")
        if spec is not None:
            t.append(f" · spec accept {f.pct(spec)}")
        restarts = f.num(live, "restarts")
        t.append(" · restarts ")
        t.append(f.count(restarts), style="bold red" if restarts else "")
    return t


class ServerPanel(Widget):
    """Repaints only when the collector's live view or the working set changed."""

    def __init__(self) -> None:
        super().__init__(id="server")
        self._live: dict[str, Any] | None = None
        self._ws = 0
        self._shape: tuple[bool, bool] | None = None
        self.border_title = "server"

    def show(self, live: dict[str, Any] | None, working_set: int) -> None:
        if live == self._live and working_set == self._ws:
            return
        shape = (live is None, bool(live and live.get("spec_accept") is not None))
        self._live, self._ws = live, working_set
        self.refresh(layout=shape != self._shape)  # the panel is auto-height
        self._shape = shape

    def render(self) -> Text:
        compact = self.size.width < 56 or self.screen.has_class("-short")
        return server_text(self._live, self._ws, compact=compact)
