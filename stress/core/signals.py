"""SIGINT and SIGTERM, routed to whoever holds them: a run, or a search around its runs."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable


class SignalRoute:
    """Where SIGINT and SIGTERM go: to the innermost holder. A run holds them while its
    engine runs; a capacity search holds them around its runs, so a Ctrl-C between two
    runs, or while one prepares or writes its report, reaches the search instead of
    raising KeyboardInterrupt in whatever code was running. A holder that takes them after
    a signal has reached an outer one is signalled at once: the run a search was starting
    when Ctrl-C came stops as it starts."""

    def __init__(self) -> None:
        self._holders: list[Callable[[], None]] = []
        self._signalled = False

    def take(self, on_signal: Callable[[], None]) -> Callable[[], None]:
        """Route both signals to ``on_signal``; returns the call that gives them back."""
        loop = asyncio.get_running_loop()
        self._holders.append(on_signal)
        self._install(loop)
        if self._signalled:
            loop.call_soon(on_signal)

        def give_back() -> None:
            self._holders.remove(on_signal)
            self._signalled = self._signalled and bool(self._holders)
            self._install(loop)

        return give_back

    def _deliver(self) -> None:
        self._signalled = True
        self._holders[-1]()

    def _install(self, loop: asyncio.AbstractEventLoop) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                if self._holders:
                    loop.add_signal_handler(sig, self._deliver)
                else:
                    loop.remove_signal_handler(sig)


SIGNALS = SignalRoute()
"""The process's one route: ``stress run`` and ``stress capacity`` both take it."""
