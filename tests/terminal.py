"""A real pseudo-terminal running the real CLI: what a user's terminal sees and sends.

The output is read by a thread as it comes (a pty whose reader stops blocks its writer)
and played into a terminal emulator (pyte), so ``screen()`` is what the user sees now;
``wait_for`` polls for a condition with a deadline, ``send`` types keys.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pyte

ESCAPES = re.compile(rb"\x1b\[[0-9;?<>=$]*[a-zA-Z~]|\x1b[()][0-9A-Za-z]|\x1b[=>]")


class Terminal:
    """``stress ARGV`` with a new pseudo-terminal as its stdin, stdout and stderr."""

    def __init__(
        self,
        argv: list[str],
        cwd: Path,
        size: tuple[int, int] = (120, 40),
        *,
        program: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        """``program`` (default: this interpreter's ``-m stress``) and ``env`` (default: this
        process's) let a test drive another install, such as a built wheel's venv."""
        self.fd, tty = pty.openpty()
        cols, rows = size
        fcntl.ioctl(tty, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.proc = subprocess.Popen(
            [*(program or [sys.executable, "-m", "stress"]), *argv],
            cwd=cwd,
            stdin=tty,
            stdout=tty,
            stderr=tty,
            env={**(os.environ if env is None else env), "TERM": "xterm-256color"},
            start_new_session=True,
        )
        os.close(tty)
        self.pid = self.proc.pid
        self.output = bytearray()
        self._screen = pyte.Screen(cols, rows)
        self._stream = pyte.ByteStream(self._screen)
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 65536)
            except OSError:  # EIO: every process holding the terminal has gone
                return
            if not data:
                return
            with self._lock:
                self.output += data
                self._stream.feed(data)

    def text(self) -> str:
        """Everything written so far, escape sequences removed."""
        with self._lock:
            raw = bytes(self.output)
        return ESCAPES.sub(b"", raw).decode("utf-8", "replace")

    def screen(self) -> str:
        """The screen as the user sees it now, one line per row, trailing blanks cut."""
        with self._lock:
            return "\n".join(line.rstrip() for line in self._screen.display)

    def raw(self) -> bytes:
        with self._lock:
            return bytes(self.output)

    def send(self, keys: bytes) -> None:
        os.write(self.fd, keys)

    def wait_for(self, what: Callable[[], bool], timeout: float, why: str) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            if time.monotonic() > deadline:
                raise AssertionError(f"{why}: not within {timeout:.0f} s; screen:\n{self.tail()}")
            if self.poll() is not None and not what():
                raise AssertionError(f"{why}: the CLI exited ({self.returncode}):\n{self.tail()}")
            time.sleep(0.05)

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float) -> int:
        self.wait_for(lambda: self.poll() is not None, timeout, "the CLI to exit")
        self._reader.join(5)
        return self.proc.wait()

    def children(self, marker: str) -> list[psutil.Process]:
        """The CLI's child processes whose command line holds ``marker``."""
        out = []
        try:
            for c in psutil.Process(self.pid).children(recursive=True):
                try:
                    if marker in " ".join(c.cmdline()):
                        out.append(c)
                except psutil.Error:
                    pass
        except psutil.Error:
            pass
        return out

    def tail(self, n: int = 3000) -> str:
        return self.text()[-n:]

    def close(self) -> None:
        if self.poll() is None:
            for p in [*self.children(""), psutil.Process(self.pid)]:
                with contextlib.suppress(psutil.Error):
                    p.kill()
            self.proc.wait()
        os.close(self.fd)
