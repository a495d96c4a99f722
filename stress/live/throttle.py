"""How many per-request event lines a screen shows: one rule for the status lines and the view.

Per-request events (a failed request, an empty reply, a stall) come by the hundred when a
server falls over; printed each, they bury the run's own lines. Both UIs show at most
``REQUEST_LINES`` of them per window (the headless printer's status interval, the view's
``REQUEST_WINDOW_S``) and say the rest in one "... and K more" line when the window closes.
Every event is in events.jsonl either way.
"""

from __future__ import annotations

from collections import Counter

REQUEST_LINES = 5
"""Per-request event lines shown per window; the rest are counted."""


class RequestLines:
    """One window's budget of per-request event lines, and what it held back."""

    def __init__(self, limit: int = REQUEST_LINES) -> None:
        self.limit = limit
        self.shown = 0
        self.held: Counter[str] = Counter()
        """Per-request events not shown in this window, by kind."""

    def admit(self, kind: str) -> bool:
        """Whether one more event of ``kind`` is shown in this window; if not, it is held."""
        if self.shown < self.limit:
            self.shown += 1
            return True
        self.held[kind] += 1
        return False

    def release(self) -> str | None:
        """The line that says what was held back (None: nothing was); the count restarts."""
        text = None
        if self.held:
            n = sum(self.held.values())
            kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.held.items()))
            text = f"... and {n} more ({kinds}): see events.jsonl"
            self.held.clear()
        return text

    def new_window(self) -> str | None:
        """Close the window: its held-back line (or None), and a full budget again."""
        text = self.release()
        self.shown = 0
        return text
