"""What the TUI keeps between ticks, and the two-step stop: pure, no Textual.

The run talks to the sink at any moment (``on_event``, ``line``), even before the app has
mounted; the app pulls from here at most twice a second (``TICK_S``). Everything is bounded: a
queue of log lines not yet shown, counters by event kind, a short power history. The
report never reads any of it: it is built from the run's files.

Per-request events (a failed request, an empty reply, a stall) can come by the hundred
when a server falls over, so at most ``REQUEST_LINES`` of them reach the log per
``REQUEST_WINDOW_S``; the rest are counted in one "... and K more" line
(``stress.live.throttle``, the status lines' rule too). Run-level failures (the recorder, a
collector, a user's task) are never held back.

Times are on the snapshot's clock (simulated seconds in a time-scaled simulator run; the
events come on the wall clock and are converted here); the flood window and the power
samples stay wall-clock spans (``REQUEST_WINDOW_S`` and ``POWER_EVERY_S`` wall seconds).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

from rich.text import Text

from stress.analysis.runfiles import sim_seconds
from stress.core.events import RunEvent
from stress.live.state import REQUEST_EVENT_KINDS, Snapshot
from stress.live.throttle import RequestLines
from stress.tui.format import gpu_cards, total_power
from stress.tui.verdict import HARDWARE_KINDS, Verdict, judge
from stress.tui.widgets.events import event_text, message_text

PENDING = 500
POWER_HISTORY = 300
POWER_EVERY_S = 1.0
REQUEST_WINDOW_S = 1.0
STOPPING = "stopping: finishing in-flight requests; press q/ctrl+c again to cancel them"
CANCELLING = "cancelling the requests still in flight; the run directory is being completed"


class Feed:
    def __init__(
        self,
        header: dict[str, Any],
        snapshot: Callable[[], Snapshot],
        on_quit: Callable[[], None],
        on_cancel: Callable[[], None],
        on_rows: Callable[[tuple[int, int] | None], None] | None = None,
    ) -> None:
        self.header = header
        self.snapshot = snapshot
        self._on_quit = on_quit
        self._on_cancel = on_cancel
        self._on_rows = on_rows
        self.pending: deque[Text] = deque(maxlen=PENDING)
        self.dropped = 0
        self.kinds: Counter[str] = Counter()
        self.warnings = 0
        self.hardware = 0
        self.power: deque[float] = deque(maxlen=POWER_HISTORY)
        self._power_t = -math.inf
        self.stops = 0
        self.last_t: float | None = None
        self._window_t = -math.inf
        self.requests = RequestLines()
        self._scale: float | None = None

    @property
    def time_scale(self) -> float:
        """The snapshots' time scale, asked once (events can come before the first tick)."""
        if self._scale is None:
            self._scale = self.snapshot().time_scale
        return self._scale

    # --- from the run ----------------------------------------------------------------

    def add_event(self, ev: RunEvent) -> None:
        self.kinds[ev.kind] += 1
        per_request = ev.kind in REQUEST_EVENT_KINDS
        if ev.severity == "warning" and not per_request:  # those count as errors / empty
            self.warnings += 1
        if ev.severity == "error" and (ev.source == "gpu" or ev.kind in HARDWARE_KINDS):
            self.hardware += 1
        if per_request:
            t = sim_seconds(ev.t, self.time_scale)
            if t >= self._window_t + sim_seconds(REQUEST_WINDOW_S, self.time_scale):
                self._release_held(new_window=True)
                self._window_t = t
            if not self.requests.admit(ev.kind):
                return
        self._push(event_text(ev, self.time_scale))

    def add_line(self, text: str) -> None:
        self._push(message_text(self.last_t, text))

    def _release_held(self, new_window: bool = False) -> None:
        held = self.requests.new_window() if new_window else self.requests.release()
        if held is not None:
            self._push(message_text(self.last_t, held))

    def _push(self, line: Text) -> None:
        if len(self.pending) == self.pending.maxlen:
            self.dropped += 1
        self.pending.append(line)

    # --- from the app ----------------------------------------------------------------

    def drain(self) -> list[Text]:
        if self.requests.held:
            window = sim_seconds(REQUEST_WINDOW_S, self.time_scale)
            if (self.last_t or 0.0) >= self._window_t + window:
                self._release_held()
        lines = list(self.pending)
        self.pending.clear()
        if self.dropped:
            lines.insert(0, Text(f"({self.dropped} lines skipped: see events.jsonl)", "dim"))
            self.dropped = 0
        return lines

    def sample(self, s: Snapshot) -> None:
        """Note the time and, once a (wall) second, the total GPU power."""
        self.last_t, self._scale = s.t, s.time_scale
        if s.t - self._power_t >= sim_seconds(POWER_EVERY_S, s.time_scale):
            watts = total_power(gpu_cards(s.collectors.get("gpu")))
            if watts is not None:
                self.power.append(watts)
                self._power_t = s.t

    def verdict(self, s: Snapshot) -> Verdict:
        slo = self.header.get("slo")
        return judge(
            s, self.kinds, self.warnings, self.hardware, slo if isinstance(slo, dict) else None
        )

    def show_rows(self, rows: tuple[int, int] | None) -> None:
        """The users' rows on screen (first, count) changed (None: every row is wanted):
        the run sends only those (``stress.live.view_process``)."""
        if self._on_rows is not None:
            self._on_rows(rows)

    def stop(self) -> str:
        """First press: graceful stop. Second: cancel in flight. Returns what to show."""
        self.stops += 1
        if self.stops == 1:
            self._on_quit()
            return STOPPING
        self._on_cancel()
        return CANCELLING
