"""The event loop every command runs on: uvloop where available, a short switch interval.

Shared by the CLI and the worker processes, which run the same client code.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


SWITCH_INTERVAL_S = 0.0002
"""How long a thread may keep the interpreter once the event loop wants it back (Python's
default: 5 ms). A run's threads hold it in bursts: the GPU collector's NVML calls and the
cards' opening (pynvml's import alone is 16-30 ms of bytecode on 2 cores), a /metrics
body parsed (``asyncio.to_thread``). Meanwhile the loop's wake, and with it the instant a
stream's bytes are stamped, waited up to the full interval: 5.2 ms late at the median
under such a thread, 0.4 ms with this one (``benchmarks/thread_wake.py``). It costs only
while a thread and the loop both want to run."""


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run on uvloop where available (the client's per-read overhead matters), with a
    short switch interval (``SWITCH_INTERVAL_S``)."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    result: T = uvloop.run(coro)
    return result
