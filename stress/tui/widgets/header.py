"""Run header: what is being tested, where the run stands, and the verdict badge.

A time-scaled simulator run is shown in simulated seconds (the snapshot's clock); the
progress line says so next to the elapsed time (``simulated time x60``).

The badge is its level, the reasons, and the scenario's SLO tiers on a line of their own
(``tiers: interactive ✖x1.3 · batch ✓``, missed first, ``TIERS_SHOWN`` at most): the
header grows by a row while the badge needs three.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Static

from stress.analysis.runfiles import sim_seconds
from stress.live.state import Snapshot
from stress.tui import format as f
from stress.tui.verdict import Verdict

LEVEL_LABEL = {"ok": "● OK", "warn": "▲ CHECK", "bad": "✖ PROBLEM"}
TIERS_SHOWN = 3
"""Tiers named on the badge's line; more are counted (``+2``): the badge keeps to a share
of the width, and what does not fit ends in an ellipsis."""
PHASE_STYLE = {
    "warmup": "yellow",
    "running": "green",
    "draining": "bold yellow",
    "finished": "cyan",
}


def identity_line(header: dict[str, Any]) -> Text:
    t = Text()
    t.append("stress ", style="bold")
    t.append(str(header.get("scenario", "-")), style="bold cyan")
    t.append(f" → {header.get('target', '-')}")
    t.append(f" · model {header.get('model', '-')}")
    t.append(f" · server {header.get('server', '-')}")
    load = header.get("load") or f"{header.get('users', '-')} users"
    t.append(f" · {load} · cache {header.get('cache', '-')}")
    return t


def progress_line(header: dict[str, Any], s: Snapshot, compact: bool = False) -> Text:
    """Phase, time, totals; ``compact`` drops the words that would not fit beside the badge
    (at 80 columns, or where the badge's reasons are long), keeping TTFT and tok/s."""
    t = Text()
    t.append(f" {s.phase} ", style=f"reverse {PHASE_STYLE.get(s.phase, 'white')}")
    duration = header.get("duration_s")  # the engine's (wall) seconds
    t.append(f" {f.clock(s.t)}")
    if isinstance(duration, int | float) and duration > 0:
        duration = sim_seconds(duration, s.time_scale)
        left = f.clock(max(0.0, duration - s.t))
        t.append(f"/{f.clock(duration)}" if compact else f" / {f.clock(duration)} ({left} left)")
    if s.clock_label:
        label = f"sim x{s.time_scale:g}" if compact else s.clock_label
        t.append(f" {label}" if compact else f" · {label}", style="bold magenta")
    rounds = header.get("rounds")
    if compact:
        t.append(f" · req {s.rounds_done}")
    else:
        t.append(f" · requests {s.rounds_done}" + (f" (rounds {rounds})" if rounds else ""))
    o = s.outcomes
    t.append(" · ok ")
    t.append(str(o.get("ok", 0)), style="green")
    t.append(" err ")
    t.append(str(s.errors), style="bold red" if s.errors else "")
    if s.cancelled:
        t.append(f" cancelled {s.cancelled}", style="yellow")
    empty = sum(o.get(k, 0) for k in ("empty", "reasoning_only", "truncated"))
    t.append(" empty ")
    t.append(str(empty), style="yellow" if empty else "")
    if s.open_loop:
        t.append(f" · {sessions_text(s, compact)}")
    if compact:
        t.append(f" · TTFT {f.secs(s.ttft_p50_recent)} · {f.rate(s.out_tok_s_recent)} tok/s")
        return t
    t.append(f" · in flight {s.in_flight}")
    t.append(f" · TTFT p50 {f.secs(s.ttft_p50_recent)}")
    t.append(f" · out {f.rate(s.out_tok_s_recent)} tok/s")
    if s.workers:
        workers_part(t, s)
    return t


def workers_part(t: Text, s: Snapshot) -> None:
    """``--workers``: how many, the busiest one's CPU and loop lag (an overloaded worker
    shows), and the dead ones in red."""
    dead = sorted(k for k, h in s.workers.items() if h.get("dead"))
    live = {
        k: h for k, h in s.workers.items() if not h.get("dead") and h.get("cpu_pct") is not None
    }
    t.append(f" · workers {len(s.workers)}")
    if live:
        k, h = max(live.items(), key=lambda kv: float(kv[1]["cpu_pct"]))
        lag = float(h.get("loop_lag_ms_max") or 0.0)
        busy = float(h["cpu_pct"]) >= 90 or lag > 20
        t.append(
            f" (busiest w{k}{'@' + str(h['host']) if h.get('host') else ''} "
            f"{float(h['cpu_pct']):.0f}% lag {lag:.0f}ms)",
            style="bold yellow" if busy else "",
        )
    if dead:
        t.append(" " + ", ".join(f"w{k}" for k in dead) + " DEAD", style="bold red")


def tiers_line(tiers: tuple[str, ...]) -> str:
    """The badge's tier line: the first ``TIERS_SHOWN`` (missed first), then how many more."""
    more = len(tiers) - TIERS_SHOWN
    return "tiers: " + " · ".join(tiers[:TIERS_SHOWN]) + (f" +{more}" if more > 0 else "")


def badge_label(verdict: Verdict) -> str:
    """The badge's lines: the level, the reasons (when any), the tiers (when any)."""
    lines = [LEVEL_LABEL[verdict.level]]
    if verdict.reasons:
        lines.append(" · ".join(verdict.reasons))
    if verdict.tiers:
        lines.append(tiers_line(verdict.tiers))
    return "\n".join(lines)


def sessions_text(s: Snapshot, compact: bool = False) -> str:
    """Open-loop sessions: active, waiting for a slot, arrived (and the recent rate)."""
    if compact:
        return f"sess {s.sessions_active}+{s.backlog}q"
    rate = s.arrivals_per_min_recent
    recent = f", {rate:.1f}/min" if rate is not None else ""
    return (
        f"sessions {s.sessions_active} active, {s.backlog} waiting, "
        f"{s.arrivals} arrived{recent}, {s.sessions_done} left"
    )


class RunHeader(Horizontal):
    """Two lines of run identity and progress, with the verdict badge on the right."""

    def __init__(self, header: dict[str, Any]) -> None:
        super().__init__(id="header", classes="search" if header.get("search") else "")
        self._header = header
        self._last: tuple[str, str] | None = None
        self._shown: tuple[Snapshot, Verdict] | None = None
        self._badge = ""

    def compose(self) -> ComposeResult:
        with Vertical(id="header-text"):
            yield Static(identity_line(self._header), id="identity")
            yield Static(id="progress")
            if self._header.get("search"):  # a pass of `stress capacity`: where it stands
                yield Static(Text(str(self._header["search"]), style="bold"), id="search")
        yield Static(LEVEL_LABEL["ok"], id="badge", classes="ok")

    def on_resize(self) -> None:
        if self._shown is not None:
            self.show(*self._shown)

    def show(self, s: Snapshot, verdict: Verdict) -> None:
        self._shown = (s, verdict)
        progress = progress_line(self._header, s)
        # the cells beside the badge (its reasons widen it); before the first layout, all
        room = self.query_one("#header-text").size.width or self.size.width
        if progress.cell_len > room:
            progress = progress_line(self._header, s, compact=True)
        label = badge_label(verdict)
        key = (progress.plain, label)
        if key == self._last:
            return
        self._last = key
        self.query_one("#progress", Static).update(progress, layout=False)
        if label != self._badge:  # the badge is auto-width: a new label needs a layout
            self._badge = label
            badge = self.query_one("#badge", Static)
            badge.update(label)
            badge.set_classes(verdict.level)
            self._fit(label.count("\n") + 1)

    def _fit(self, lines: int) -> None:
        """Give the badge its lines (two at least, as the stylesheet), the header with it:
        a third line (the tiers beside reasons) takes a row from the body while it lasts."""
        rows = max(2, lines)
        badge = self.query_one("#badge", Static)
        if badge.styles.height is not None and badge.styles.height.value == rows:
            return
        badge.styles.height = rows
        self.styles.height = max(rows, 3 if self._header.get("search") else 2)
