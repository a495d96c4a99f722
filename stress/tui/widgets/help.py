"""The ``?`` screen: keys, and what quitting does to the run (nothing is lost)."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import ModalScreen
from textual.widgets import Static

HELP = """\
[b]keys[/b]
  q, ctrl+c      stop gracefully: no new turns, requests in flight finish,
                 the run directory is completed (same as one Ctrl-C)
  q again        cancel the requests still in flight
  up/down        move between users
  enter          open the selected user's recent turns (esc to close)
  ?              this help (esc to close)

[b]columns[/b]
  state          what the user does now, and for how long:
                 1st token 23s  sent 23 s ago, no token yet
                 silent 12s     streaming, but no byte for 12 s (a stall in the making)
                 thinking 4s    4 s before the next turn
                 reasoning, content, error, done
  TTFT           time to first token of the user's last turn
  tok/s          tokens per second of the stream in flight (else the last decode)
  cached         share of the last prompt the server served from cache
  retain         cached / reusable: below 100% the user's blocks were evicted
  stall          this user's requests that stalled or never got a first token
  (narrow terminals leave out retain, rnd, conv tok... rather than cut rows)

A time-scaled simulator run shows simulated seconds everywhere (times, ages,
tok/s); the header says so: simulated time x60.

Quitting never loses the run: the files are written either way.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,question_mark", "dismiss", "Back")]

    def compose(self) -> ComposeResult:
        yield Static(HELP, id="help")
