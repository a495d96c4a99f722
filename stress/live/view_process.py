"""The live view in its own process: ``TuiProcess``, the UI sink ``stress.runtime.run`` uses on a
terminal.

Textual's compositor repaints on the event loop it runs on. On the load generator's loop
that cost 4-6 % of a core with 64 users and stalled the loop for 24-45 ms now and then,
and every stall lands on the timestamps of the tokens that arrive meanwhile (issue 15). So
the view runs in a child process (``python -m stress.tui.child``, niced, the terminal
inherited) and this side only sends it what it shows: the run's header, then twice a
second the latest ``Snapshot`` with the events and lines since the last one, pickled on a
pipe. Keys come back on a second pipe (``quit``, ``cancel``), and the rows of the users'
table the view shows (``rows FIRST COUNT``): only those rows are built and sent, so a tick
at 2,000 users costs what one at a hundred does.

The view can never cost the run: a send never blocks (while the child has not read the
last snapshot, the next is skipped and events wait, bounded), and if the child fails to
start, dies, or stops answering, this falls back to the headless printer for the rest of
the run. At the end the child is told to stop and awaited (bounded), so the terminal is
restored before the summary is printed. This module imports no Textual: the parent never
loads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import operator
import os
import pickle
import struct
import subprocess
import sys
import termios
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from stress.core.events import RunEvent
from stress.core.secrets import REDACTOR
from stress.live.headless import HeadlessPrinter, fallback_printer
from stress.live.state import Snapshot, TurnSummary, UserRow

TICK_S = 0.5
"""Seconds between snapshots: the view repaints on each, twice a second. Where the view
shares a core with the run (a 2-core machine), each repaint costs the run too (its caches
are cold after the view ran): at 4 a second the run's process paid 1.079x its headless CPU
per paced chunk and the view's 4.0 % of a core; at 2, 1.027x and 2.5 %
(``benchmarks/e2e.py``, docs/performance.md). The live figures are per second or per turn,
and scrolling and keys are the view's own, so twice a second loses nothing to watch."""
TICK_BUDGET = 0.02
"""The share of the run's loop a tick may take: a tick that took longer spaces the next
ones out, so the view never costs the run more than this of its time, nor stalls it
twice a second. Since the view says which rows it shows, a tick at 2,000 users takes ~0.6
ms on dev (every row: 12-23 ms on the H200 host); until it has said (its first screen),
or on a terminal thousands of lines tall, this bounds it."""
NICE = 10
"""The child's niceness: where it shares a core with the run, the run comes first (its
start-up overlaps the run's first requests)."""
READY_TIMEOUT_S = 15.0
"""A view that has not drawn its first screen in this long is given up for lines."""
EXIT_TIMEOUT_S = 5.0
"""How long the end of a run waits for the child to restore the terminal."""
PENDING = 2000
"""Events and lines held for the child between snapshots; older ones are counted."""
FRAME = struct.Struct("<I")
RESTORE = (
    "\x1b[<u"  # the keyboard protocol pushed on start
    "\x1b[?1000l\x1b[?1003l\x1b[?1015l\x1b[?1006l\x1b[?1016l"  # mouse reporting
    "\x1b[?2004l\x1b[?2048l\x1b[?1004l"  # bracketed paste, resize and focus reports
    "\x1b[?7h"  # line wrap back on
    "\x1b[?1049l"  # back from the alternate screen
    "\x1b[?25h"  # the cursor shown
)
"""What a full-screen view turns on and must turn off: written, with the terminal's saved
settings put back, when the child died without doing it itself."""


class SnapshotSource(Protocol):
    """The run's live state now: every user's row, or the window ``rows`` (first, count)."""

    def __call__(self, rows: tuple[int, int] | None = None) -> Snapshot: ...


def parse_rows(line: str) -> tuple[int, int] | None:
    """``rows FIRST COUNT`` from the view (``rows -``: all of them); None for all, or for a
    line that does not say two whole numbers."""
    parts = line.split()
    if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
        return int(parts[1]), int(parts[2])
    return None


def frame(obj: object, *, rows_without_recent: bool = False) -> bytes:
    """One message on the pipe: its length, then its pickle. ``rows_without_recent``: the
    users' rows go without their recent turns (a tick sends those apart: ``Ticks``)."""
    buf = io.BytesIO()
    buf.write(b"\0" * FRAME.size)
    pickler = pickle.Pickler(buf, protocol=5)
    pickler.dispatch_table = _TICK_REDUCERS if rows_without_recent else _REDUCERS
    pickler.dump(obj)
    data = buf.getbuffer()
    FRAME.pack_into(data, 0, len(data) - FRAME.size)
    return data.tobytes()


class _Reducers(dict[type, Callable[[Any], Any]]):
    """The pickler's ``dispatch_table``: a dataclass is pickled as its constructor and its
    field values. The default for a slotted dataclass is Python code that lists the fields
    for every instance (a snapshot of 64 users took ~1 ms, on the run's loop); a
    ``reducer_override`` was a Python call for every tuple, list and dict as well. Here the
    pickler looks a type up in C and calls Python only for the dataclasses; a type is
    looked at the first time it is seen."""

    def __missing__(self, cls: type) -> Callable[[Any], Any]:
        values = _field_values(cls)
        if values is None:
            raise KeyError(cls)  # the pickler's own way (copyreg, __reduce_ex__)
        fn = self[cls] = _reducer(cls, values)
        return fn


def _reducer(cls: type, values: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any], Any]:
    return lambda obj: (cls, values(obj))


_ROW_FIELDS = [f.name for f in dataclasses.fields(UserRow)]
_ROW_VALUES = operator.attrgetter(*_ROW_FIELDS)
_RECENT = _ROW_FIELDS.index("recent")


def _row_without_recent(row: UserRow) -> Any:
    """A user's row without its recent turns (``()`` in their place)."""
    values = _ROW_VALUES(row)
    return UserRow, (*values[:_RECENT], (), *values[_RECENT + 1 :])


_REDUCERS = _Reducers()
_TICK_REDUCERS = _Reducers({UserRow: _row_without_recent})


class Ticks:
    """A tick on the pipe, and back: the snapshot, the events and lines since the last one,
    and only the users' recent turns that changed since the last tick sent.

    The users' recent turns were most of a tick (59 of 66 KB at 64 users with ten turns
    each, pickled at every tick on the run's loop) and change once a turn; ``Live``
    keeps each user's as one tuple until a turn ends, so the sender knows them unchanged
    by identity. Every tick written reaches the child in order (a skipped tick is not
    written at all), so both ends hold the same turns."""

    def __init__(self) -> None:
        self._recent: dict[int, tuple[TurnSummary, ...]] = {}
        """Sender: the turns the child holds, by user. Receiver: the turns received."""

    def encode(self, snap: Snapshot, items: list[RunEvent | str], dropped: int) -> bytes:
        held = self._recent
        changed = {r.user: r.recent for r in snap.users if held.get(r.user) is not r.recent}
        self._recent = {r.user: r.recent for r in snap.users}
        return frame(("tick", snap, items, dropped, changed), rows_without_recent=True)

    def decode(self, snap: Snapshot, changed: dict[int, tuple[TurnSummary, ...]]) -> Snapshot:
        held = self._recent
        self._recent = {
            r.user: changed[r.user] if r.user in changed else held.get(r.user, ())
            for r in snap.users
        }
        rows = tuple(dataclasses.replace(r, recent=self._recent[r.user]) for r in snap.users)
        return dataclasses.replace(snap, users=rows)


def _field_values(cls: type) -> Callable[[Any], tuple[Any, ...]] | None:
    """A dataclass's field values in ``__init__``'s order, or None where that cannot
    rebuild it (not a dataclass, or a field ``__init__`` does not take)."""
    if not dataclasses.is_dataclass(cls):
        return None
    fields = dataclasses.fields(cls)
    if not fields or not all(f.init for f in fields):
        return None
    if len(fields) == 1:
        name = fields[0].name
        return lambda obj: (getattr(obj, name),)
    return operator.attrgetter(*(f.name for f in fields))


class Frames:
    """Splits what the pipe delivers (in any pieces) back into messages."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Any]:
        self._buf += data
        out = []
        while len(self._buf) >= FRAME.size:
            (n,) = FRAME.unpack_from(self._buf)
            if len(self._buf) < FRAME.size + n:
                break
            out.append(pickle.loads(self._buf[FRAME.size : FRAME.size + n]))
            del self._buf[: FRAME.size + n]
        return out


class _Control(asyncio.Protocol):
    """The child's messages, one per line: ``ready``, ``quit``, ``cancel``, ``rows F N``,
    ``failed ...``."""

    def __init__(self, owner: TuiProcess) -> None:
        self.owner = owner
        self.buf = b""
        self.closed = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        for line in lines:
            self.owner._control(line.decode("utf-8", "replace"))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


class ViewChild:
    """The view's process, started (and niced) when this is made. ``stress run`` makes it
    before its own imports, so the child's (Textual's, ~0.3 s, over 1 s on a slow host)
    overlap them instead of delaying the first request; it waits for the run's header
    before it takes the terminal. ``discard`` ends one the run never used."""

    def __init__(self, args: tuple[str, ...] = ()) -> None:
        self.tty: list[Any] | None = None
        """The terminal's settings before the child took it (restored if it dies)."""
        with contextlib.suppress(OSError, termios.error, ValueError):
            self.tty = termios.tcgetattr(sys.stdin.fileno())
        down_r, self.down_w = os.pipe()
        self.up_r, up_w = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "stress.tui.child", str(down_r), str(up_w), *args],
                pass_fds=(down_r, up_w),
            )
        except OSError:
            for fd in (self.down_w, self.up_r):
                os.close(fd)
            raise
        finally:
            os.close(down_r)
            os.close(up_w)
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, self.proc.pid, NICE)
        self.taken = False

    def take(self) -> tuple[int, int]:
        """This side's ends of the pipes (to the child, from it), for one run."""
        assert not self.taken
        self.taken = True
        return self.down_w, self.up_r

    def discard(self) -> None:
        """End a child no run took (a scenario that did not load, a target that did not
        answer): it has not touched the terminal, which it takes only on the run's header,
        so it is killed at once rather than waited for."""
        if self.taken:
            return
        self.taken = True
        for fd in (self.down_w, self.up_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(OSError):
            self.proc.kill()
        self.proc.wait()


class TuiProcess:
    """Satisfies ``stress.live.headless.UiSink``; ``started`` is set once the view's process
    has the run's header: the run then sends its first request.

    ``args`` go to the child (``--headless WxH`` renders into a virtual screen, for
    benchmarks)."""

    def __init__(
        self,
        header: dict[str, Any],
        snapshot: SnapshotSource,
        on_quit: Callable[[], None],
        on_cancel: Callable[[], None],
        *,
        tick_s: float = TICK_S,
        args: tuple[str, ...] = (),
        child: ViewChild | None = None,
    ) -> None:
        self.header = header
        self.snapshot = snapshot
        self._on_quit = on_quit
        self._on_cancel = on_cancel
        self.tick_s = tick_s
        self.args = args
        self.started = asyncio.Event()
        """Set once the view's process has its header (the run sends its first request
        then, not waiting for the first screen), or when the run gave up on it."""
        self.ready = False
        """The view has drawn its first screen."""
        self.child = child
        """The view's process, if started before the run (else ``run`` starts it)."""
        self.failure: str | None = None
        """Why the child gave up (its own words), if it said."""
        self._pending: deque[RunEvent | str] = deque(maxlen=PENDING)
        self._dropped = 0
        self._ticks = Ticks()
        self.interval = tick_s
        """Seconds to the next tick: ``tick_s``, longer when the last tick took more
        than ``TICK_BUDGET`` of it."""
        self._fallback: HeadlessPrinter | None = None
        self._ended = False
        self.sent = 0
        self.rows: tuple[int, int] | None = None
        """The users' rows the view shows (first, count), as it said; None: all of them."""

    # --- from the run ------------------------------------------------------------------

    def line(self, text: str) -> None:
        if self._fallback is not None:
            self._fallback.line(text)
        elif self._ended:  # the screen is gone: straight to the terminal
            print(REDACTOR.text(text), flush=True)
        else:
            self._hold(text)

    def on_event(self, ev: RunEvent) -> None:
        if self._fallback is not None:
            self._fallback.on_event(ev)
        elif not self._ended:
            self._hold(ev)

    def _hold(self, item: RunEvent | str) -> None:
        if len(self._pending) == self._pending.maxlen:
            self._dropped += 1
        self._pending.append(item)

    def _control(self, line: str) -> None:
        if line == "ready":
            self.ready = True
        elif line == "quit":
            self._on_quit()
        elif line == "cancel":
            self._on_cancel()
        elif line.startswith("rows "):
            self.rows = parse_rows(line)
        elif line.startswith("failed "):
            self.failure = line[7:]

    # --- the child -----------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        try:
            if self.child is None or self.child.taken:
                self.child = ViewChild(self.args)
            down_w, up_r = self.child.take()
        except OSError as e:
            await self._headless(stop, f"the live view could not start ({e})")
            return
        writer, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(down_w, "wb", 0))
        _, control = await loop.connect_read_pipe(lambda: _Control(self), os.fdopen(up_r, "rb", 0))
        reason: str | None = None
        try:
            writer.write(frame(("header", self.header)))
            self._send(writer)
            # the run need not wait for the first screen: the view starts on a process of
            # its own (niced), and what happens meanwhile is shown when it is up
            self.started.set()
            give_up = loop.time() + READY_TIMEOUT_S
            while not stop.is_set():
                stopped = asyncio.create_task(stop.wait())
                await asyncio.wait({stopped, control.closed}, timeout=self.interval)
                stopped.cancel()
                if control.closed.done() and not stop.is_set():
                    # closed by its user, or its process died
                    reason = "ended" if self.ready else "ended before its first screen"
                    break
                if not self.ready and loop.time() > give_up:
                    reason = f"did not draw its first screen in {READY_TIMEOUT_S:.0f} s"
                    break
                self._send(writer)
            if reason is None:
                self._send(writer)  # the last lines (stopping, cancelling) before the stop
                writer.write(frame(("stop",)))
        except (OSError, RuntimeError) as e:  # the pipe broke: the child is gone
            reason = f"failed ({e})"
        finally:
            self._ended = reason is None
            if not await self._reap(writer, force=reason is not None):
                self._restore_terminal()
            self.started.set()
        if reason is not None:
            await self._headless(stop, f"the live view {reason}{self._why()}")

    def _send(self, writer: asyncio.WriteTransport) -> None:
        if writer.is_closing():
            return
        if writer.get_write_buffer_size():  # the child is behind: skip, never queue
            return
        t0 = time.perf_counter()
        items, self._pending = list(self._pending), deque(maxlen=PENDING)
        dropped, self._dropped = self._dropped, 0
        # the view shows events as they come (``items``), not the snapshot's recent ones
        snap = dataclasses.replace(self.snapshot(self.rows), events=())
        writer.write(self._ticks.encode(snap, items, dropped))
        self.sent += 1
        self.interval = max(self.tick_s, (time.perf_counter() - t0) / TICK_BUDGET)

    async def _reap(self, writer: asyncio.WriteTransport, *, force: bool) -> bool:
        """Wait for the child to restore the terminal and exit (bounded), then close;
        True when it exited by itself (so the terminal is as it found it)."""
        assert self.child is not None
        proc = self.child.proc
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (1.0 if force else EXIT_TIMEOUT_S)
        # let the stop frame reach it (a child that stopped reading gets the deadline)
        while writer.get_write_buffer_size() and proc.poll() is None and loop.time() < deadline:
            await asyncio.sleep(0.01)
        writer.close()
        for signal_it in (None, proc.terminate, proc.kill):
            if signal_it is not None:
                with contextlib.suppress(OSError):
                    signal_it()
            wait = max(deadline - loop.time(), 0.0) if signal_it is None else 1.0
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(proc.wait, wait)
                return signal_it is None and proc.returncode == 0
        return False

    def _why(self) -> str:
        """What the child said, or how it ended."""
        if self.failure:
            return f": {self.failure}"
        rc = self.child.proc.returncode if self.child is not None else None
        if rc is not None and rc < 0:
            return f" (its process was killed by signal {-rc})"
        return f" (its process exited with status {rc})" if rc else ""

    def _restore_terminal(self) -> None:
        """Put the terminal back as it was before the child took it (a child that died
        could not): its settings, then the screen modes a full-screen view turns on."""
        tty = self.child.tty if self.child is not None else None
        if tty is not None:
            with contextlib.suppress(OSError, termios.error, ValueError):
                termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, tty)
        out = sys.__stderr__  # where Textual draws
        with contextlib.suppress(OSError, ValueError, AttributeError):
            if out is not None and out.isatty():
                out.write(RESTORE)
                out.flush()

    async def _headless(self, stop: asyncio.Event, reason: str) -> None:
        printer = fallback_printer(self.snapshot, self.header)
        self._fallback = printer
        printer.line(f"{reason}; continuing with plain output")
        for item in self._pending:
            if isinstance(item, str):
                printer.line(item)
            else:
                printer.on_event(item)
        self._pending.clear()
        self.started.set()
        await printer.run(stop)
