"""The event log: errors, empty replies, stalls, preemption bursts, restarts, hangs, warnings.

Each line has the run time (simulated seconds in a time-scaled simulator run), the user
(when there is one), the severity and the message.
Run-level failures (the recorder cannot write, a collector or a user's task died) are
labelled ``FAIL`` in reverse red. The log keeps a bounded number of lines; the full record
is ``events.jsonl``.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.text import Text
from textual.widgets import RichLog

from stress.analysis.runfiles import sim_seconds
from stress.core.events import RunEvent
from stress.core.secrets import REDACTOR
from stress.live.state import RUN_FAILURE_KINDS
from stress.tui import format as f

MAX_LINES = 500
SEVERITY_LABEL = {"info": "info", "warning": "WARN", "error": "ERR"}
SEVERITY_STYLE = {"info": "dim", "warning": "yellow", "error": "bold red"}


def event_text(ev: RunEvent, time_scale: float = 1.0) -> Text:
    """One log line; ``time_scale`` puts the event's (wall) time on the snapshot's clock."""
    t = Text(f"{f.clock(sim_seconds(ev.t, time_scale)):>7} ", style="dim")
    t.append(f"{'u' + str(ev.user) if ev.user is not None else ev.source:<6} ")
    style = SEVERITY_STYLE.get(ev.severity, "")
    label = SEVERITY_LABEL.get(ev.severity, ev.severity[:4])
    if ev.kind in RUN_FAILURE_KINDS:  # the run itself is failing: not just one request
        style, label = "bold white on red", "FAIL"
    t.append(f"{label:<4} ", style=style)
    t.append(REDACTOR.text(ev.message), style="" if ev.severity == "info" else style)
    return t


def message_text(t_s: float | None, message: str) -> Text:
    t = Text(f"{f.clock(t_s) if t_s is not None else '':>7} ", style="dim")
    t.append(f"{'stress':<6} ")
    t.append(REDACTOR.text(message), style="bold")
    return t


class EventLog(RichLog):
    def __init__(self) -> None:
        super().__init__(id="events", max_lines=MAX_LINES, wrap=False, markup=False)
        self.border_title = "events"
        self.can_focus = False

    def add(self, lines: Iterable[Text]) -> None:
        for line in lines:
            self.write(line)
